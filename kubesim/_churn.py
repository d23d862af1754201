"""A churn generator: creates, updates and deletes objects of a kind mix at a steady rate.

Run it as a trio task (``nursery.start_soon(churn.run)``). Each tick performs the operations
that are due since the start (so a slow tick catches up instead of drifting), keeps about
``population`` objects per kind alive in its namespace, and counts what it did.
"""

from __future__ import annotations

import base64
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio

from kubesim._cluster import Cluster
from kubesim._errors import ApiError
from kubesim._loader import realistic_pod

__all__ = ["KINDS", "Churn", "ChurnStatistics"]

# kind name -> (group, version, plural)
KINDS: dict[str, tuple[str, str, str]] = {
    "configmaps": ("", "v1", "configmaps"),
    "secrets": ("", "v1", "secrets"),
    "services": ("", "v1", "services"),
    "pods": ("", "v1", "pods"),
    "deployments": ("apps", "v1", "deployments"),
}
_TICK = 0.01  # seconds between batches at high rates


@dataclass(frozen=True, slots=True)
class ChurnStatistics:
    created: int
    updated: int
    deleted: int
    failed: int


class Churn:
    """Changes objects at ``rate`` operations per second in ``namespace``."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        rate: float,
        kinds: Sequence[str] = ("configmaps", "pods", "deployments"),
        namespace: str = "churn",
        population: int = 50,
        seed: int | None = None,
    ) -> None:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            raise ValueError(f"churn kinds must be among {sorted(KINDS)}, got {list(kinds)}")
        if rate <= 0:
            raise ValueError(f"churn rate must be > 0 operations/s, got {rate}")
        self.cluster = cluster
        self.rate = rate
        self.kinds = tuple(kinds)
        self.namespace = namespace
        self.population = population
        self._random = random.Random(seed)
        self._names: dict[str, list[str]] = {k: [] for k in self.kinds}
        self._serial = 0
        self._created = self._updated = self._deleted = self._failed = 0

    def statistics(self) -> ChurnStatistics:
        return ChurnStatistics(self._created, self._updated, self._deleted, self._failed)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Churn until cancelled."""
        if ("", self.namespace) not in self.cluster.store(
            self.cluster.resolve("", "v1", "namespaces")
        ).objects:
            self.cluster.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            )
        task_status.started()
        start = trio.current_time()
        done = 0
        interval = max(_TICK, 1.0 / self.rate)
        while True:
            due = math.floor((trio.current_time() - start) * self.rate) - done
            for _ in range(max(0, due)):
                self.step()
            done += max(0, due)
            await trio.sleep(interval)

    def step(self) -> None:
        """One operation: create below the population, otherwise update (2/3) or delete."""
        kind = self._random.choice(self.kinds)
        names = self._names[kind]
        roll = self._random.random()
        try:
            if len(names) < self.population // 2 or (len(names) < self.population and roll < 0.3):
                self._create(kind)
            elif roll < 0.7:
                self._update(kind, self._random.choice(names))
            else:
                name = names.pop(self._random.randrange(len(names)))
                group, version, plural = KINDS[kind]
                self.cluster.delete(group, version, plural, self.namespace, name)
                self._deleted += 1
        except ApiError:
            self._failed += 1

    def _create(self, kind: str) -> None:
        self._serial += 1
        name = f"churn-{kind[:-1]}-{self._serial}"
        self.cluster.create(self._object(kind, name), manager="kubesim-churn")
        self._names[kind].append(name)
        self._created += 1

    def _update(self, kind: str, name: str) -> None:
        group, version, plural = KINDS[kind]
        value = str(self._random.randrange(1_000_000))
        patch: dict[str, Any]
        if kind == "deployments" and self._random.random() < 0.5:
            patch = {"spec": {"replicas": self._random.randrange(1, 4)}}
        elif kind == "configmaps":
            patch = {"data": {"value": value}}
        elif kind == "secrets":
            patch = {"data": {"value": base64.b64encode(value.encode()).decode()}}
        else:
            patch = {"metadata": {"annotations": {"kubesim/churn": value}}}
        self.cluster.patch(
            group, version, plural, self.namespace, name, patch, manager="kubesim-churn"
        )
        self._updated += 1

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": self.namespace, "labels": {"churn": "true"}}
        if kind == "configmaps":
            return {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta,
                "data": {"value": "0", "config.yaml": "a: 1\nb: two\n"},
            }
        if kind == "secrets":
            return {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": meta,
                "type": "Opaque",
                "data": {"value": "c2VjcmV0"},
            }
        if kind == "services":
            return {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta,
                "spec": {"selector": {"app": name}, "ports": [{"port": 80}]},
            }
        if kind == "pods":
            pod = realistic_pod(self.namespace, self._serial)
            pod["metadata"].update(meta)
            for field in ("generateName", "ownerReferences", "creationTimestamp"):
                pod["metadata"].pop(field, None)
            return pod
        labels = {"app": name}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
                },
            },
        }
