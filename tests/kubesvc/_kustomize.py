"""Rendering manifests/overlays/* as ``kubectl kustomize`` does, with or without kubectl.

``kubectl_render`` runs the real kustomize (kubectl 1.32 embeds kustomize v5.5). ``render`` is
the project's own reading of the same files, for machines without kubectl: it understands
exactly the kustomize features manifests/ uses, and refuses any other with the file and field,
so a new feature cannot slip past it unread. ``test_manifests`` checks that both agree where
kubectl is present.

The features: ``resources`` (YAML files, or folders holding a kustomization.yaml),
``components`` (folders of ``kind: Component``), ``namespace`` (set on every namespaced
object), ``patches`` given inline as a JSON 6902 list (``add``/``replace``/``remove``)
with a ``target`` of ``kind`` and ``name``, and ``configMapGenerator`` entries made of
``files`` inside the kustomization's folder, with ``disableNameSuffixHash: true`` (this reader
computes no hashes) and optional ``labels``/``annotations``.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KustomizeError", "kubectl_render", "render", "rendered_files"]

KUSTOMIZATION = "kustomization.yaml"
_KNOWN_FIELDS = frozenset(
    {"apiVersion", "kind", "resources", "components", "namespace", "patches", "configMapGenerator"}
)
# The kinds manifests/ has that are not namespaced (kustomize's list is longer).
_CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})

Document = dict[str, Any]


class KustomizeError(Exception):
    """A kustomization this reader does not understand, or kubectl refused."""


def kubectl_render(folder: Path) -> list[Document] | None:
    """``kubectl kustomize folder`` as documents; None where kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {folder}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render(folder: Path) -> list[Document]:
    """The objects the kustomization in ``folder`` builds (the project's own reading)."""
    return _build(folder, set())


def rendered_files(folder: Path) -> set[Path]:
    """Every file the kustomization in ``folder`` reads, its own and its bases'."""
    seen: set[Path] = set()
    _build(folder, seen)
    return seen


def _load(path: Path) -> Document:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise KustomizeError(f"{path}: expected a mapping")
    unknown = set(data) - _KNOWN_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: fields this reader does not know: {sorted(unknown)}")
    return data


def _build(folder: Path, seen: set[Path]) -> list[Document]:
    path = folder / KUSTOMIZATION
    seen.add(path.resolve())
    spec = _load(path)
    objects: list[Document] = []
    for entry in spec.get("resources", []):
        target = (folder / entry).resolve()
        if target.is_dir():
            objects.extend(_build(target, seen))
        else:
            seen.add(target)
            objects.extend(d for d in yaml.safe_load_all(target.read_text()) if d)
    for entry in spec.get("components", []):
        component = (folder / entry).resolve()
        if _load(component / KUSTOMIZATION).get("kind") != "Component":
            raise KustomizeError(f"{component}: a component must say kind: Component")
        objects = _apply_component(component, objects, seen)
    for index, generator in enumerate(spec.get("configMapGenerator", [])):
        where = f"{path}: configMapGenerator[{index}]"
        objects.append(_generated_configmap(folder, generator, where, seen))
    for index, patch in enumerate(spec.get("patches", [])):
        objects = _patched(objects, patch, f"{path}: patches[{index}]")
    namespace = spec.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in _CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
    return objects


def _generated_configmap(
    folder: Path, generator: Document, where: str, seen: set[Path]
) -> Document:
    """The ConfigMap a configMapGenerator entry makes: one data key per file (its name, or
    the ``key=`` before it), the options' labels and annotations on it."""
    options = generator.get("options") or {}
    if set(generator) - {"name", "files", "options"} or not generator.get("files"):
        raise KustomizeError(f"{where}: only name, files and options are read")
    if set(options) - {"disableNameSuffixHash", "labels", "annotations"}:
        raise KustomizeError(f"{where}: options other than labels and annotations")
    if options.get("disableNameSuffixHash") is not True:
        raise KustomizeError(f"{where}: needs disableNameSuffixHash: true (no hashes here)")
    data: dict[str, str] = {}
    for entry in generator["files"]:
        key, _, name = entry.rpartition("=")
        target = (folder / name).resolve()
        if not target.is_relative_to(folder.resolve()):
            raise KustomizeError(f"{where}: {entry} is outside {folder} (kustomize refuses it)")
        seen.add(target)
        data[key or target.name] = target.read_text()
    metadata: Document = {"name": generator["name"]}
    for field in ("labels", "annotations"):
        if options.get(field):
            metadata[field] = dict(options[field])
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def _apply_component(folder: Path, objects: list[Document], seen: set[Path]) -> list[Document]:
    """A component adds its resources to, and patches, what the kustomization built so far."""
    spec = _load(folder / KUSTOMIZATION)
    seen.add((folder / KUSTOMIZATION).resolve())
    for entry in spec.get("resources", []):
        target = (folder / entry).resolve()
        seen.add(target)
        objects = objects + [d for d in yaml.safe_load_all(target.read_text()) if d]
    for index, patch in enumerate(spec.get("patches", [])):
        objects = _patched(objects, patch, f"{folder / KUSTOMIZATION}: patches[{index}]")
    return objects


def _patched(objects: list[Document], patch: Document, where: str) -> list[Document]:
    target = patch.get("target") or {}
    if set(target) - {"kind", "name"} or not isinstance(patch.get("patch"), str):
        raise KustomizeError(f"{where}: expected a target (kind, name) and an inline patch")
    operations = yaml.safe_load(patch["patch"])
    if not isinstance(operations, list):
        raise KustomizeError(f"{where}: only JSON 6902 patches (a list of operations)")
    matched = False
    result = []
    for obj in objects:
        if obj["kind"] == target.get("kind", obj["kind"]) and obj["metadata"]["name"] == target.get(
            "name", obj["metadata"]["name"]
        ):
            matched = True
            obj = copy.deepcopy(obj)
            for operation in operations:
                _apply_operation(obj, operation, where)
        result.append(obj)
    if not matched:
        raise KustomizeError(f"{where}: no object matches the target {target}")
    return result


def _apply_operation(obj: Document, operation: Document, where: str) -> None:
    op, pointer = operation.get("op"), operation.get("path", "")
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if op in ("add", "replace") and isinstance(node, list):
        if last == "-":
            node.append(operation["value"])
        elif op == "add":
            node.insert(int(last), operation["value"])
        else:
            node[int(last)] = operation["value"]
    elif op in ("add", "replace"):
        node[last] = operation["value"]
    elif op == "remove":
        del node[int(last) if isinstance(node, list) else last]
    else:
        raise KustomizeError(f"{where}: operation {op!r} is not one this reader applies")
