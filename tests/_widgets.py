"""A custom resource the tests share: kubesim, the agent's operations and the kubectl golden
cases all need one namespaced kind that is not built in."""

from __future__ import annotations

from typing import Any

__all__ = ["widget_crd"]


def widget_crd() -> dict[str, Any]:
    """A namespaced CRD for kind Widget in group example.com, v1, any fields."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        },
                    },
                }
            ],
        },
    }
