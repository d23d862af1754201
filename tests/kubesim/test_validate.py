"""Object validation: the API server's rules and its words, 400 for undecodable, 422 for invalid."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest

from kubesim._errors import InvalidObject
from kubesim._validate import validate_object


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    namespaced: bool = True


DEPLOYMENT = Kind("apps", "v1", "Deployment")
POD = Kind("", "v1", "Pod")
SERVICE = Kind("", "v1", "Service")
CONFIGMAP = Kind("", "v1", "ConfigMap")
SECRET = Kind("", "v1", "Secret")
NAMESPACE = Kind("", "v1", "Namespace", namespaced=False)
CLUSTERROLE = Kind("rbac.authorization.k8s.io", "v1", "ClusterRole", namespaced=False)
CRONJOB = Kind("batch", "v1", "CronJob")
ROLE = Kind("rbac.authorization.k8s.io", "v1", "Role")
BINDING = Kind("rbac.authorization.k8s.io", "v1", "RoleBinding")
HPA = Kind("autoscaling", "v2", "HorizontalPodAutoscaler")
PVC = Kind("", "v1", "PersistentVolumeClaim")


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "nginx",
                            "ports": [{"containerPort": 80}],
                            "env": [{"name": "MODE", "value": "x"}],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }


def invalid(obj: Any, kind: Kind = DEPLOYMENT, **url: str) -> InvalidObject:
    with pytest.raises(InvalidObject) as info:
        validate_object(obj, kind_info=kind, **url)
    return info.value


def test_valid_objects_pass() -> None:
    validate_object(deployment(), kind_info=DEPLOYMENT, namespace="default", name="web")
    validate_object({"metadata": {"generateName": "web-"}}, kind_info=CONFIGMAP)
    validate_object({"metadata": {"name": "system:aggregate-to-view"}}, kind_info=CLUSTERROLE)
    validate_object(
        {"metadata": {"name": "s"}, "data": {"a.b": "aGVsbG8=", "c": ""}, "stringData": {"d": "x"}},
        kind_info=SECRET,
    )
    validate_object(
        {"metadata": {"name": "svc"},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"},
                            {"name": "https", "port": 443, "targetPort": 8443}]}},
        kind_info=SERVICE,
    )  # fmt: skip


def test_selector_must_match_template_labels_in_the_apiservers_words() -> None:
    obj = deployment()
    obj["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    err = invalid(obj)
    assert err.code == 422
    assert err.message == (
        'Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`'
    )
    status = err.status()
    assert status["reason"] == "Invalid"
    assert status["details"] == {
        "name": "web",
        "group": "apps",
        "kind": "Deployment",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: map[string]string{"app":"other"}: '
                "`selector` does not match template `labels`",
                "field": "spec.template.metadata.labels",
            }
        ],
    }


def test_several_errors_are_listed_in_brackets() -> None:
    obj = deployment()
    del obj["spec"]["selector"]
    obj["spec"]["template"]["spec"]["containers"][0] = {"name": "Bad_Name"}
    err = invalid(obj)
    assert err.message.startswith(
        'Deployment.apps "web" is invalid: [spec.selector: Required value, '
    )
    fields = [c["field"] for c in err.causes]
    assert fields == [
        "spec.selector",
        "spec.template.spec.containers[0].name",
        "spec.template.spec.containers[0].image",
    ]


@pytest.mark.parametrize(
    ("mutate", "field", "text"),
    [
        (lambda o: o["metadata"].update(name="Web_1"), "metadata.name",
         "a lowercase RFC 1123 subdomain must consist of"),
        (lambda o: o["metadata"].update(name="a" * 254), "metadata.name",
         "must be no more than 253 characters"),
        (lambda o: o["metadata"].pop("name"), "metadata.name",
         "Required value: name or generateName is required"),
        (lambda o: o["metadata"].update(namespace="Bad NS"), "metadata.namespace",
         "a lowercase RFC 1123 label"),
        (lambda o: o["metadata"]["labels"].update(app="x" * 64), "metadata.labels",
         "must be no more than 63 characters"),
        (lambda o: o["metadata"]["labels"].update(app="bad value!"), "metadata.labels",
         "a valid label must be an empty string or consist of alphanumeric characters"),
        (lambda o: o["metadata"]["labels"].update({"bad key": "x"}), "metadata.labels",
         "name part must consist of alphanumeric characters"),
        (lambda o: o["metadata"]["labels"].update({"Example.COM/x": "y"}), "metadata.labels",
         "prefix part a lowercase RFC 1123 subdomain"),
        (lambda o: o["metadata"]["labels"].update({"a/b/c": "y"}), "metadata.labels",
         "a qualified name must consist of"),
        (lambda o: o["metadata"].update(annotations={"k": "x" * 300_000}), "metadata.annotations",
         "Too long: must have at most 262144 bytes"),
        (lambda o: o["spec"].update(replicas=-1), "spec.replicas",
         "Invalid value: -1: must be greater than or equal to 0"),
        (lambda o: o["spec"].update(selector={}), "spec.selector",
         "empty selector is invalid for deployment"),
        (lambda o: o["spec"].pop("template"), "spec.template", "Required value"),
        (lambda o: o["spec"]["template"]["spec"].update(containers=[]),
         "spec.template.spec.containers", "Required value"),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("image"),
         "spec.template.spec.containers[0].image", "Required value"),
        (lambda o: o["spec"]["template"]["spec"]["containers"].append(
            {"name": "app", "image": "x"}),
         "spec.template.spec.containers[1].name", 'Duplicate value: "app"'),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
            containerPort=70000), "spec.template.spec.containers[0].ports[0].containerPort",
         "Invalid value: 70000: must be between 1 and 65535, inclusive"),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
            protocol="HTTP"), "spec.template.spec.containers[0].ports[0].protocol",
         'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"'),
        (lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"][0].update(name="1X"),
         "spec.template.spec.containers[0].env[0].name",
         "a valid environment variable name"),
        (lambda o: o["spec"]["template"]["spec"].update(volumes=[]),
         "spec.template.spec.containers[0].volumeMounts[0].name", 'Not found: "data"'),
        (lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Never"),
         "spec.template.spec.restartPolicy",
         'Unsupported value: "Never": supported values: "Always"'),
        (lambda o: o["spec"]["selector"].update(matchExpressions=[
            {"key": "tier", "operator": "NotIn", "values": ["front"]}]),
         "spec.template.metadata.labels", "`selector` does not match template `labels`"),
    ],
)  # fmt: skip
def test_field_errors(mutate: Any, field: str, text: str) -> None:
    obj = deployment()
    mutate(obj)
    err = invalid(obj)
    assert err.code == 422
    assert field in [c["field"] for c in err.causes], err.message
    assert f"{field}: " in err.message
    assert text in err.message


@pytest.mark.parametrize(
    ("body", "kind", "url", "text"),
    [
        ([1, 2], DEPLOYMENT, {}, "the request body must be a JSON object, not an array"),
        ("x", DEPLOYMENT, {}, "the request body must be a JSON object, not a string"),
        ({"apiVersion": "v1", "metadata": {"name": "a"}}, DEPLOYMENT, {},
         "the API version in the data (v1) does not match the expected API version (apps/v1)"),
        ({"kind": "Pod", "metadata": {"name": "a"}}, SERVICE, {},
         "the kind in the data (Pod) does not match the expected kind (Service)"),
        ({"metadata": {"name": "a", "namespace": "x"}}, CONFIGMAP, {"namespace": "y"},
         "the namespace of the provided object does not match the namespace sent on the request"),
        ({"metadata": {"name": "a"}}, CONFIGMAP, {"name": "b"},
         "the name of the object (a) does not match the name on the URL (b)"),
        ({"metadata": "a"}, CONFIGMAP, {}, "metadata must be a JSON object, not a string"),
        ({"metadata": {"name": "a", "labels": {"x": 1}}}, CONFIGMAP, {},
         "metadata.labels.x must be a string, not a number"),
        ({"metadata": {"name": "a"}, "data": {"k": 1}}, CONFIGMAP, {},
         "ConfigMap data[k] must be a string, not a number"),
        ({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}, SECRET, {},
         "Secret data[k] is not valid base64: illegal base64 data at input byte 3"),
        ({"metadata": {"name": "s"}, "data": {"k": "abc"}}, SECRET, {},
         "illegal base64 data at input byte 0"),
        ({"metadata": {"name": "a"}, "spec": {"replicas": "2"}}, DEPLOYMENT, {},
         "spec.replicas must be an integer, not a string"),
        ({"metadata": {"name": "a"}, "spec": {"ports": {"port": 80}}}, SERVICE, {},
         "spec.ports must be a JSON array, not an object"),
    ],
)  # fmt: skip
def test_undecodable_bodies_are_bad_requests(
    body: Any, kind: Kind, url: dict[str, str], text: str
) -> None:
    err = invalid(body, kind, **url)
    assert err.code == 400
    assert err.status()["reason"] == "BadRequest"
    assert text in err.message


@pytest.mark.parametrize(
    ("obj", "kind", "message"),
    [
        ({"metadata": {"name": "my_ns"}}, NAMESPACE,
         'Namespace "my_ns" is invalid: metadata.name: Invalid value: "my_ns": a lowercase RFC '
         "1123 label must consist of"),
        ({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}, SERVICE,
         'Service "1svc" is invalid: metadata.name: Invalid value: "1svc": a DNS-1035 label'),
        ({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}}, SERVICE,
         'Service "s" is invalid: [spec.ports[0].name: Required value, spec.ports[1].name: '
         "Required value]"),
        ({"metadata": {"name": "s"}, "spec": {"ports": [{"name": "a", "port": 0}]}}, SERVICE,
         "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"),
        ({"metadata": {"name": "s"}, "spec": {}}, SERVICE,
         'Service "s" is invalid: spec.ports: Required value'),
        ({"metadata": {"name": "s"}, "spec": {"type": "Magic", "ports": [{"port": 1}]}}, SERVICE,
         'spec.type: Unsupported value: "Magic"'),
        ({"metadata": {"name": "s"}, "spec": {"ports": [{"name": "a", "port": 80},
          {"name": "b", "port": 80}]}}, SERVICE, 'spec.ports[1]: Duplicate value: "80/TCP"'),
        ({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": 0}]}}, SERVICE,
         "spec.ports[0].targetPort: Invalid value: 0"),
        ({"metadata": {"name": "c"}, "data": {"bad/key": "v"}}, CONFIGMAP,
         'ConfigMap "c" is invalid: data[bad/key]: Invalid value: "bad/key": a valid config key'),
        ({"metadata": {"name": "c"}, "data": {"k": "v"}, "binaryData": {"k": "dg=="}}, CONFIGMAP,
         "data[k]: Invalid value: \"k\": duplicate of key present in binaryData"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}],
          "restartPolicy": "Sometimes"}}, POD,
         'spec.restartPolicy: Unsupported value: "Sometimes"'),
        ({"metadata": {"name": "p"}, "spec": {}}, POD,
         'Pod "p" is invalid: spec.containers: Required value'),
        ({"metadata": {"name": "cj"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {
          "containers": [{"name": "c", "image": "i"}], "restartPolicy": "OnFailure"}}}}}}, CRONJOB,
         'CronJob.batch "cj" is invalid: spec.schedule: Required value'),
        ({"metadata": {"name": "a/b"}}, CLUSTERROLE,
         "metadata.name: Invalid value: \"a/b\": may not contain '/' or '%'"),
        ({"metadata": {"generateName": "Bad-"}}, CONFIGMAP,
         'metadata.generateName: Invalid value: "Bad-"'),
        ({"metadata": {"name": "r"}, "rules": [{"resources": ["pods"], "verbs": []}]}, ROLE,
         'Role.rbac.authorization.k8s.io "r" is invalid: [rules[0].verbs: Required value: verbs '
         "must contain at least one value, rules[0].apiGroups: Required value: resource rules "
         "must supply at least one api group]"),
        ({"metadata": {"name": "b"}, "roleRef": {"kind": "Pod", "name": "x"},
          "subjects": [{"kind": "User"}]}, BINDING,
         '[roleRef.kind: Unsupported value: "Pod": supported values: "ClusterRole", "Role", '
         "subjects[0].name: Required value]"),
        ({"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"kind": "Deployment",
          "name": "web"}, "minReplicas": 5, "maxReplicas": 2}}, HPA,
         "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"),
        ({"metadata": {"name": "h"}, "spec": {"maxReplicas": 2}}, HPA,
         "[spec.scaleTargetRef.kind: Required value, spec.scaleTargetRef.name: Required value]"),
        ({"metadata": {"name": "v"}, "spec": {"accessModes": ["ReadWriteSometimes"]}}, PVC,
         'spec.accessModes: Unsupported value: "ReadWriteSometimes"'),
        ({"metadata": {"name": "v"}, "spec": {"accessModes": ["ReadWriteOnce"]}}, PVC,
         'PersistentVolumeClaim "v" is invalid: spec.resources[storage]: Required value'),
    ],
)  # fmt: skip
def test_kind_specific_rules(obj: dict[str, Any], kind: Kind, message: str) -> None:
    err = invalid(obj, kind)
    assert err.code == 422
    assert message in err.message


def test_validation_does_not_change_the_object() -> None:
    obj = deployment()
    validate_object(obj, kind_info=DEPLOYMENT)
    assert obj == deployment()
    bad = copy.deepcopy(obj)
    bad["spec"]["replicas"] = -5
    invalid(bad)
    assert bad["spec"]["replicas"] == -5
