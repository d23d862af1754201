"""Object validation with the API server's rules and its error messages (pure).

:func:`validate_object` raises :class:`InvalidObject`:

- **400 BadRequest** for what the API server fails to *decode*: a body that is not a JSON
  object, an apiVersion or kind that does not match the endpoint, a namespace or name that
  does not match the URL, values of the wrong JSON type (labels that are not strings,
  Secret data that is not base64, ...).
- **422 Invalid** for field errors, one Status cause each, in the API server's words:
  ``Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value:
  map[string]string{"app":"x"}: `selector` does not match template `labels```. Several errors
  are listed in brackets, comma-separated, as the API server does.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol

from ._errors import InvalidObject
from ._fielderrors import FieldErrors as _Errors
from ._fielderrors import bad_request as _bad_request
from ._fielderrors import json_type as _json_type
from ._validate_kinds import KIND_CHECKS as _KIND_CHECKS

__all__ = ["KindInfo", "validate_object"]


class KindInfo(Protocol):
    """What validation needs to know about the endpoint's resource."""

    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def namespaced(self) -> bool: ...


_LABEL_RE: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE: Final = _LABEL_RE + r"(\." + _LABEL_RE + ")*"
_DNS1035_RE: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_NAME_PART_RE: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_RE: Final = "(" + _NAME_PART_RE + ")?"
_CONFIG_KEY_RE: Final = "[-._a-zA-Z0-9]+"

_label = re.compile(_LABEL_RE).fullmatch
_subdomain = re.compile(_SUBDOMAIN_RE).fullmatch
_dns1035 = re.compile(_DNS1035_RE).fullmatch
_name_part = re.compile(_NAME_PART_RE).fullmatch
_config_key = re.compile(_CONFIG_KEY_RE).fullmatch

_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_SUBDOMAIN_RE}')"
)
_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_LABEL_RE}')"
)
_DNS1035_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'abc-123', regex used for validation is '{_DNS1035_RE}')"
)
_NAME_PART_MSG: Final = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    f"for validation is '{_NAME_PART_RE}')"
)
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE_RE}')"
)
_CONFIG_KEY_MSG: Final = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    f"'{_CONFIG_KEY_RE}')"
)

# Kinds whose names are DNS-1123 labels / DNS-1035 labels; RBAC names are path segments.
_LABEL_NAMED: Final = frozenset({"Namespace"})
_DNS1035_NAMED: Final = frozenset({"Service"})
_PATH_SEGMENT_NAMED: Final = frozenset({"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"})
_WORKLOADS: Final = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
_PROTOCOLS: Final = ("SCTP", "TCP", "UDP")
_SERVICE_TYPES: Final = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_MAX_ANNOTATIONS_BYTES: Final = 256 * 1024


def validate_object(
    obj: Any, *, kind_info: KindInfo, namespace: str | None = None, name: str | None = None
) -> None:
    """Check ``obj`` (a decoded request body) for the endpoint described by ``kind_info``.

    ``namespace`` and ``name`` are the request URL's, when it names them. A missing apiVersion
    or kind is accepted (the endpoint implies them, as for the API server). Returns None when
    the object is valid; raises :class:`InvalidObject` (400 or 422, see the module docstring).
    """
    if not isinstance(obj, dict):
        raise _bad_request(f"the request body must be a JSON object, not {_json_type(obj)}")
    group, kind = kind_info.group, kind_info.kind
    expected_version = f"{group}/{kind_info.version}" if group else kind_info.version
    api_version = obj.get("apiVersion")
    if api_version not in (None, "", expected_version):
        raise _bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({expected_version})"
        )
    if obj.get("kind") not in (None, "", kind):
        raise _bad_request(
            f"the kind in the data ({obj.get('kind')}) does not match the expected kind ({kind})"
        )
    meta = obj.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise _bad_request(f"metadata must be a JSON object, not {_json_type(meta)}")
    errors = _Errors()
    _check_metadata(meta, kind_info, namespace, name, errors)
    check = _KIND_CHECKS.get(kind)
    if check is not None:
        check(obj, errors)
    if errors.lines:
        shown_name = str(meta.get("name") or name or meta.get("generateName") or "")
        qualified = f"{kind}.{group}" if group else kind
        detail = errors.lines[0] if len(errors.lines) == 1 else "[" + ", ".join(errors.lines) + "]"
        raise InvalidObject(
            f'{qualified} "{shown_name}" is invalid: {detail}',
            causes=errors.causes,
            kind=kind,
            group=group,
            name=shown_name,
        )


def _check_metadata(
    meta: dict[str, Any],
    kind_info: KindInfo,
    url_namespace: str | None,
    url_name: str | None,
    errors: _Errors,
) -> None:
    name, generate = meta.get("name"), meta.get("generateName")
    if url_name is not None and name not in (None, "", url_name):
        raise _bad_request(
            f"the name of the object ({name}) does not match the name on the URL ({url_name})"
        )
    for field, value in (("name", name), ("generateName", generate)):
        if value is not None and not isinstance(value, str):
            raise _bad_request(f"metadata.{field} must be a string, not {_json_type(value)}")
    if name:
        _check_name(kind_info.kind, "metadata.name", name, errors)
    elif generate:
        # The API server validates the prefix with a stand-in suffix.
        _check_name(kind_info.kind, "metadata.generateName", generate + "x", errors, generate)
    elif url_name is None:
        errors.required("metadata.name", "name or generateName is required")
    given_ns = meta.get("namespace")
    if kind_info.namespaced:
        if given_ns and url_namespace and given_ns != url_namespace:
            raise _bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        if given_ns is not None and not isinstance(given_ns, str):
            raise _bad_request("metadata.namespace must be a string")
        if given_ns and not (len(given_ns) <= 63 and _label(given_ns)):
            errors.invalid("metadata.namespace", given_ns, _LABEL_MSG)
    _check_string_map(meta, "labels", errors, _check_label)
    _check_string_map(meta, "annotations", errors, _check_annotation_key)
    annotations = meta.get("annotations")
    if annotations:
        size = sum(len(k) + len(v) for k, v in annotations.items())
        if size > _MAX_ANNOTATIONS_BYTES:
            errors.add(
                "FieldValueTooLong",
                "metadata.annotations",
                f"Too long: must have at most {_MAX_ANNOTATIONS_BYTES} bytes",
            )


def _check_name(kind: str, field: str, name: str, errors: _Errors, shown: str = "") -> None:
    shown = shown or name
    if kind in _PATH_SEGMENT_NAMED:
        if name in (".", "..") or "/" in name or "%" in name:
            errors.invalid(field, shown, "may not contain '/' or '%' and may not be '.' or '..'")
    elif kind in _LABEL_NAMED:
        if len(name) > 63:
            errors.invalid(field, shown, "must be no more than 63 characters")
        elif not _label(name):
            errors.invalid(field, shown, _LABEL_MSG)
    elif kind in _DNS1035_NAMED:
        if len(name) > 63:
            errors.invalid(field, shown, "must be no more than 63 characters")
        elif not _dns1035(name):
            errors.invalid(field, shown, _DNS1035_MSG)
    elif len(name) > 253:
        errors.invalid(field, shown, "must be no more than 253 characters")
    elif not _subdomain(name):
        errors.invalid(field, shown, _SUBDOMAIN_MSG)


def _check_string_map(meta: dict[str, Any], field: str, errors: _Errors, check: Any) -> None:
    values = meta.get(field)
    if values is None:
        return
    if not isinstance(values, dict):
        raise _bad_request(f"metadata.{field} must be an object of strings")
    for key, value in values.items():
        if not isinstance(value, str):
            raise _bad_request(f"metadata.{field}.{key} must be a string, not {_json_type(value)}")
        check(f"metadata.{field}", key, value, errors)


# Label and annotation keys and label values repeat across objects: remember the valid ones
# (bounded; cleared when full) so that the write hot path skips their regular expressions.
_KNOWN_GOOD_MAX: Final = 4096
_good_keys: set[str] = set()
_good_values: set[str] = set()


def _remember(known: set[str], item: str) -> None:
    if len(known) >= _KNOWN_GOOD_MAX:
        known.clear()
    known.add(item)


def _check_qualified_name(field: str, key: str, errors: _Errors) -> None:
    if key in _good_keys:
        return
    before = len(errors.lines)
    _qualified_name_errors(field, key, errors)
    if len(errors.lines) == before:
        _remember(_good_keys, key)


def _qualified_name_errors(field: str, key: str, errors: _Errors) -> None:
    prefix, _, part = key.rpartition("/")
    if "/" in prefix:
        errors.invalid(
            field,
            key,
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character with an optional DNS subdomain "
            "prefix and '/' (e.g. 'MyName',  or 'my.name',  or '123-abc')",
        )
        return
    if prefix or key.startswith("/"):
        if not prefix:
            errors.invalid(field, key, "prefix part must be non-empty")
        elif len(prefix) > 253:
            errors.invalid(field, key, "prefix part must be no more than 253 characters")
        elif not _subdomain(prefix):
            errors.invalid(field, key, "prefix part " + _SUBDOMAIN_MSG)
    if not part:
        errors.invalid(field, key, "name part must be non-empty")
    elif len(part) > 63:
        errors.invalid(field, key, "name part must be no more than 63 characters")
    elif not _name_part(part):
        errors.invalid(field, key, _NAME_PART_MSG)


def _check_label(field: str, key: str, value: str, errors: _Errors) -> None:
    _check_qualified_name(field, key, errors)
    if value in _good_values:
        return
    if len(value) > 63:
        errors.invalid(field, value, "must be no more than 63 characters")
    elif value and not _name_part(value):
        errors.invalid(field, value, _LABEL_VALUE_MSG)
    else:
        _remember(_good_values, value)


def _check_annotation_key(field: str, key: str, value: str, errors: _Errors) -> None:
    # Annotation keys are qualified names written lower-case ("must be lower case" is
    # reported only by the apiserver for the prefix, which _check_qualified_name covers).
    _check_qualified_name(field, key.lower(), errors)
