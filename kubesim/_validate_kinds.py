"""The structural checks a real API server makes on the common kinds (a useful few, not all).

Each check takes the object and a :class:`FieldErrors` and adds field errors (422); a value of
the wrong JSON type raises a 400 at once, as a decoding failure does in the API server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from ._fielderrors import FieldErrors, bad_request, json_type

__all__ = ["KIND_CHECKS"]

_LABEL_RE: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_ENV_RE: Final = "[-._a-zA-Z][-._a-zA-Z0-9]*"
_CONFIG_KEY_RE: Final = "[-._a-zA-Z0-9]+"
_label = re.compile(_LABEL_RE).fullmatch
_env_name = re.compile(_ENV_RE).fullmatch
_config_key = re.compile(_CONFIG_KEY_RE).fullmatch
_port_name = re.compile("[a-z0-9]([a-z0-9-]*[a-z0-9])?").fullmatch
_base64_char = re.compile("[^A-Za-z0-9+/=]").search

_CONTAINER_NAME_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_LABEL_RE}')"
)
_ENV_MSG: Final = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    f"'MyEnvName1', regex used for validation is '{_ENV_RE}')"
)
_CONFIG_KEY_MSG: Final = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    f"'{_CONFIG_KEY_RE}')"
)
_PORT_RANGE: Final = "must be between 1 and 65535, inclusive"
_PROTOCOLS: Final = ("SCTP", "TCP", "UDP")
_MAX_DATA_BYTES: Final = 1024 * 1024


def _map_of(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{field} must be a JSON object, not {json_type(value)}")
    return value


def _list_of(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"{field} must be a JSON array, not {json_type(value)}")
    return value


def _int_or_none(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{field} must be an integer, not {json_type(value)}")
    return value


# --- pods and pod templates ------------------------------------------------------------------


def _pod_spec(spec: Any, path: str, errors: FieldErrors, *, template: bool) -> None:
    spec = _map_of(spec, path)
    volumes: set[str] = set()
    for i, volume in enumerate(_list_of(spec.get("volumes"), f"{path}.volumes")):
        where = f"{path}.volumes[{i}]"
        volume = _map_of(volume, where)
        name = volume.get("name")
        if not name:
            errors.required(f"{where}.name")
        elif name in volumes:
            errors.duplicate(f"{where}.name", name)
        else:
            volumes.add(name)
    containers = _list_of(spec.get("containers"), f"{path}.containers")
    if not containers:
        errors.required(f"{path}.containers")
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        items = containers if field == "containers" else spec.get(field)
        for i, container in enumerate(_list_of(items, f"{path}.{field}")):
            _container(_map_of(container, f"{path}.{field}[{i}]"), f"{path}.{field}[{i}]",
                       errors, seen, volumes)  # fmt: skip
    policy = spec.get("restartPolicy")
    allowed = ("Always",) if template else ("Always", "Never", "OnFailure")
    if policy is not None and policy not in allowed:
        errors.unsupported(f"{path}.restartPolicy", policy, allowed)


def _container(
    container: dict[str, Any], where: str, errors: FieldErrors, seen: set[str], volumes: set[str]
) -> None:
    name = container.get("name")
    if not name:
        errors.required(f"{where}.name")
    elif not isinstance(name, str) or len(name) > 63 or not _label(name):
        errors.invalid(f"{where}.name", name, _CONTAINER_NAME_MSG)
    elif name in seen:
        errors.duplicate(f"{where}.name", name)
    else:
        seen.add(name)
    if not container.get("image"):
        errors.required(f"{where}.image")
    for j, port in enumerate(_list_of(container.get("ports"), f"{where}.ports")):
        at = f"{where}.ports[{j}]"
        port = _map_of(port, at)
        number = _int_or_none(port.get("containerPort"), f"{at}.containerPort")
        if number is None:
            errors.required(f"{at}.containerPort")
        elif not 1 <= number <= 65535:
            errors.invalid(f"{at}.containerPort", number, _PORT_RANGE)
        if port.get("protocol") not in (None, *_PROTOCOLS):
            errors.unsupported(f"{at}.protocol", port["protocol"], _PROTOCOLS)
    for j, env in enumerate(_list_of(container.get("env"), f"{where}.env")):
        at = f"{where}.env[{j}]"
        env_name = _map_of(env, at).get("name")
        if not env_name:
            errors.required(f"{at}.name")
        elif not isinstance(env_name, str) or not _env_name(env_name):
            errors.invalid(f"{at}.name", env_name, _ENV_MSG)
    for j, mount in enumerate(_list_of(container.get("volumeMounts"), f"{where}.volumeMounts")):
        at = f"{where}.volumeMounts[{j}]"
        mount = _map_of(mount, at)
        if not mount.get("name"):
            errors.required(f"{at}.name")
        elif mount["name"] not in volumes:
            errors.add("FieldValueNotFound", f"{at}.name", f'Not found: "{mount["name"]}"')
        if not mount.get("mountPath"):
            errors.required(f"{at}.mountPath")


def _check_pod(obj: dict[str, Any], errors: FieldErrors) -> None:
    _pod_spec(obj.get("spec"), "spec", errors, template=False)


# --- workloads -----------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in _map_of(selector.get("matchLabels"), "selector.matchLabels").items():
        if labels.get(key) != value:
            return False
    for expr in _list_of(selector.get("matchExpressions"), "selector.matchExpressions"):
        expr = _map_of(expr, "selector.matchExpressions[]")
        label, op = str(expr.get("key", "")), expr.get("operator")
        values = expr.get("values") or []
        if (
            (op == "In" and labels.get(label) not in values)
            or (op == "NotIn" and label in labels and labels[label] in values)
            or (op == "Exists" and label not in labels)
            or (op == "DoesNotExist" and label in labels)
        ):
            return False
    return True


def _template(
    spec: dict[str, Any], path: str, errors: FieldErrors, selector: dict[str, Any] | None
) -> None:
    template = spec.get("template")
    if template is None:
        errors.required(f"{path}.template")
        return
    template = _map_of(template, f"{path}.template")
    labels = _map_of(_map_of(template.get("metadata"), f"{path}.template.metadata").get("labels"),
                     f"{path}.template.metadata.labels")  # fmt: skip
    if selector is not None and not _selects(selector, labels):
        errors.invalid(
            f"{path}.template.metadata.labels",
            labels,
            "`selector` does not match template `labels`",
        )
    _pod_spec(template.get("spec"), f"{path}.template.spec", errors, template=selector is not None)


def _workload(kind: str) -> Callable[[dict[str, Any], FieldErrors], None]:
    noun = kind.lower()

    def check(obj: dict[str, Any], errors: FieldErrors) -> None:
        spec = _map_of(obj.get("spec"), "spec")
        replicas = _int_or_none(spec.get("replicas"), "spec.replicas")
        if replicas is not None and replicas < 0:
            errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")
        selector = spec.get("selector")
        if selector is None:
            errors.required("spec.selector")
        else:
            selector = _map_of(selector, "spec.selector")
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                errors.invalid("spec.selector", selector, f"empty selector is invalid for {noun}")
                selector = None
        _template(spec, "spec", errors, selector if isinstance(selector, dict) else None)

    return check


def _check_job(obj: dict[str, Any], errors: FieldErrors) -> None:
    spec = _map_of(obj.get("spec"), "spec")
    _job_spec(spec, "spec", errors)


def _job_spec(spec: dict[str, Any], path: str, errors: FieldErrors) -> None:
    template = _map_of(spec.get("template"), f"{path}.template")
    if not template:
        errors.required(f"{path}.template")
        return
    tspec = _map_of(template.get("spec"), f"{path}.template.spec")
    _pod_spec(tspec, f"{path}.template.spec", errors, template=False)
    if tspec.get("restartPolicy") not in ("Never", "OnFailure"):
        errors.unsupported(f"{path}.template.spec.restartPolicy",
                           tspec.get("restartPolicy", ""), ("OnFailure", "Never"))  # fmt: skip


def _check_cronjob(obj: dict[str, Any], errors: FieldErrors) -> None:
    spec = _map_of(obj.get("spec"), "spec")
    schedule = spec.get("schedule")
    if not schedule:
        errors.required("spec.schedule")
    elif not isinstance(schedule, str) or (
        not schedule.startswith("@") and len(schedule.split()) != 5
    ):
        errors.invalid("spec.schedule", schedule, "unparseable schedule: expected 5 fields")
    job = _map_of(_map_of(spec.get("jobTemplate"), "spec.jobTemplate").get("spec"),
                  "spec.jobTemplate.spec")  # fmt: skip
    _job_spec(job, "spec.jobTemplate.spec", errors)


# --- services ------------------------------------------------------------------------------


def _check_service(obj: dict[str, Any], errors: FieldErrors) -> None:
    spec = _map_of(obj.get("spec"), "spec")
    kind = spec.get("type", "ClusterIP")
    types = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
    if kind not in types:
        errors.unsupported("spec.type", kind, types)
    ports = _list_of(spec.get("ports"), "spec.ports")
    if kind == "ExternalName":
        if not spec.get("externalName"):
            errors.required("spec.externalName")
    elif not ports and spec.get("clusterIP") != "None":
        errors.required("spec.ports")
    names: set[str] = set()
    pairs: set[tuple[int, str]] = set()
    for i, port in enumerate(ports):
        at = f"spec.ports[{i}]"
        port = _map_of(port, at)
        name = port.get("name")
        if len(ports) > 1 and not name:
            errors.required(f"{at}.name")
        elif name:
            if not isinstance(name, str) or len(name) > 63 or not _label(name):
                errors.invalid(f"{at}.name", name, _CONTAINER_NAME_MSG)
            elif name in names:
                errors.duplicate(f"{at}.name", name)
            names.add(str(name))
        number = _int_or_none(port.get("port"), f"{at}.port")
        if number is None:
            errors.required(f"{at}.port")
        elif not 1 <= number <= 65535:
            errors.invalid(f"{at}.port", number, _PORT_RANGE)
        protocol = port.get("protocol", "TCP")
        if protocol not in _PROTOCOLS:
            errors.unsupported(f"{at}.protocol", protocol, _PROTOCOLS)
        elif number is not None:
            if (number, protocol) in pairs:
                errors.duplicate(at, f"{number}/{protocol}")
            pairs.add((number, protocol))
        _target_port(port.get("targetPort"), f"{at}.targetPort", errors)
        node_port = _int_or_none(port.get("nodePort"), f"{at}.nodePort")
        if node_port and kind not in ("NodePort", "LoadBalancer"):
            errors.add("FieldValueForbidden", f"{at}.nodePort",
                       "Forbidden: may not be used when `type` is 'ClusterIP'")  # fmt: skip


def _target_port(target: Any, field: str, errors: FieldErrors) -> None:
    if target is None:
        return
    if isinstance(target, bool):
        raise bad_request(f"{field} must be an integer or a string, not a boolean")
    if isinstance(target, int):
        if not 1 <= target <= 65535:
            errors.invalid(field, target, _PORT_RANGE)
    elif isinstance(target, str):
        if target.isdigit():
            number = int(target)
            if not 1 <= number <= 65535:
                errors.invalid(field, target, _PORT_RANGE)
        elif len(target) > 15 or not _port_name(target) or target.isdigit():
            errors.invalid(field, target, "must be no more than 15 characters and contain only "
                           "lower case alphanumeric characters and '-'")  # fmt: skip
    else:
        raise bad_request(f"{field} must be an integer or a string, not {json_type(target)}")


# --- config maps and secrets ---------------------------------------------------------------


def _keys(data: dict[str, Any], field: str, errors: FieldErrors) -> None:
    for key in data:
        if len(key) > 253:
            errors.invalid(f"{field}[{key}]", key, "must be no more than 253 characters")
        elif not _config_key(key) or key in (".", ".."):
            errors.invalid(f"{field}[{key}]", key, _CONFIG_KEY_MSG)


def _strings(data: dict[str, Any], kind: str, field: str) -> None:
    for key, value in data.items():
        if not isinstance(value, str):
            raise bad_request(
                f"{kind} {field}[{key}] must be a string, not {json_type(value)} (json: cannot "
                f"unmarshal {json_type(value).split()[-1]} into Go struct field {kind}.{field} "
                "of type string)"
            )


def _base64_values(data: dict[str, Any], kind: str, field: str) -> int:
    size = 0
    for key, value in data.items():
        if not isinstance(value, str):
            raise bad_request(f"{kind} {field}[{key}] must be a base64 string, not "
                              f"{json_type(value)}")  # fmt: skip
        bad = _base64_char(value)
        position = bad.start() if bad else None
        if position is None and len(value) % 4:
            position = len(value) - len(value) % 4
        if position is None and "=" in value.rstrip("="):
            position = value.index("=")
        if position is not None:
            raise bad_request(
                f"{kind} {field}[{key}] is not valid base64: illegal base64 data at input "
                f"byte {position}"
            )
        size += len(value) * 3 // 4
    return size


def _check_configmap(obj: dict[str, Any], errors: FieldErrors) -> None:
    data = _map_of(obj.get("data"), "data")
    binary = _map_of(obj.get("binaryData"), "binaryData")
    _strings(data, "ConfigMap", "data")
    size = _base64_values(binary, "ConfigMap", "binaryData") + sum(
        len(k) + len(v) for k, v in data.items()
    )
    _keys(data, "data", errors)
    _keys(binary, "binaryData", errors)
    for key in data.keys() & binary.keys():
        errors.invalid(f"data[{key}]", key, "duplicate of key present in binaryData")
    if size > _MAX_DATA_BYTES:
        errors.add(
            "FieldValueTooLong", "[]", f"Too long: must have at most {_MAX_DATA_BYTES} bytes"
        )


def _check_secret(obj: dict[str, Any], errors: FieldErrors) -> None:
    data = _map_of(obj.get("data"), "data")
    string_data = _map_of(obj.get("stringData"), "stringData")
    size = _base64_values(data, "Secret", "data")
    _strings(string_data, "Secret", "stringData")
    _keys(data, "data", errors)
    _keys(string_data, "stringData", errors)
    size += sum(len(v) for v in string_data.values())
    if size > _MAX_DATA_BYTES:
        errors.add(
            "FieldValueTooLong", "data", f"Too long: must have at most {_MAX_DATA_BYTES} bytes"
        )
    secret_type = obj.get("type")
    if secret_type is not None and not isinstance(secret_type, str):
        raise bad_request(f"Secret type must be a string, not {json_type(secret_type)}")


# --- RBAC, autoscaling, storage --------------------------------------------------------------


def _check_role(obj: dict[str, Any], errors: FieldErrors) -> None:
    for i, rule in enumerate(_list_of(obj.get("rules"), "rules")):
        rule = _map_of(rule, f"rules[{i}]")
        if not _list_of(rule.get("verbs"), f"rules[{i}].verbs"):
            errors.required(f"rules[{i}].verbs", "verbs must contain at least one value")
        if not rule.get("nonResourceURLs") and not rule.get("apiGroups"):
            errors.required(
                f"rules[{i}].apiGroups",
                "resource rules must supply at least one api group",
            )


def _check_binding(obj: dict[str, Any], errors: FieldErrors) -> None:
    ref = _map_of(obj.get("roleRef"), "roleRef")
    if ref.get("kind") not in ("Role", "ClusterRole"):
        errors.unsupported("roleRef.kind", ref.get("kind", ""), ("ClusterRole", "Role"))
    if not ref.get("name"):
        errors.required("roleRef.name")
    for i, subject in enumerate(_list_of(obj.get("subjects"), "subjects")):
        subject = _map_of(subject, f"subjects[{i}]")
        kind = subject.get("kind")
        if kind not in ("Group", "ServiceAccount", "User"):
            errors.unsupported(
                f"subjects[{i}].kind", kind or "", ("Group", "ServiceAccount", "User")
            )
        if not subject.get("name"):
            errors.required(f"subjects[{i}].name")


def _check_hpa(obj: dict[str, Any], errors: FieldErrors) -> None:
    spec = _map_of(obj.get("spec"), "spec")
    target = _map_of(spec.get("scaleTargetRef"), "spec.scaleTargetRef")
    for field in ("kind", "name"):
        if not target.get(field):
            errors.required(f"spec.scaleTargetRef.{field}")
    high = _int_or_none(spec.get("maxReplicas"), "spec.maxReplicas")
    low = _int_or_none(spec.get("minReplicas"), "spec.minReplicas")
    if high is None or high < 1:
        errors.invalid("spec.maxReplicas", high or 0, "must be greater than or equal to 1")
    if low is not None and low < 1:
        errors.invalid("spec.minReplicas", low, "must be greater than or equal to 1")
    elif low is not None and high is not None and low > high:
        errors.invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`")


def _check_pvc(obj: dict[str, Any], errors: FieldErrors) -> None:
    spec = _map_of(obj.get("spec"), "spec")
    modes = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
    access = _list_of(spec.get("accessModes"), "spec.accessModes")
    if not access:
        errors.required("spec.accessModes", "at least 1 access mode is required")
    for mode in access:
        if mode not in modes:
            errors.unsupported("spec.accessModes", mode, modes)
    resources = _map_of(spec.get("resources"), "spec.resources")
    if not _map_of(resources.get("requests"), "spec.resources.requests").get("storage"):
        errors.required("spec.resources[storage]")


KIND_CHECKS: Final[dict[str, Callable[[dict[str, Any], FieldErrors], None]]] = {
    "Pod": _check_pod,
    "Deployment": _workload("Deployment"),
    "ReplicaSet": _workload("ReplicaSet"),
    "StatefulSet": _workload("StatefulSet"),
    "DaemonSet": _workload("DaemonSet"),
    "Job": _check_job,
    "CronJob": _check_cronjob,
    "Service": _check_service,
    "ConfigMap": _check_configmap,
    "Secret": _check_secret,
    "Role": _check_role,
    "ClusterRole": _check_role,
    "RoleBinding": _check_binding,
    "ClusterRoleBinding": _check_binding,
    "HorizontalPodAutoscaler": _check_hpa,
    "PersistentVolumeClaim": _check_pvc,
}
