"""Pure shaping of Clouddriver's manifest reads: names, artifacts, events, cluster criteria.

No I/O: the handlers fetch from the store and call these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._kinds import KindRef, resolve_kind
from ._errors import BadRequest, NotFound

__all__ = [
    "CRITERIA",
    "age_key",
    "artifacts_of",
    "events_about",
    "parse_manifest_name",
    "pick_by_criteria",
]


def parse_manifest_name(raw: str) -> tuple[KindRef, str]:
    """`"deployment my-app"` -> (the kind, "my-app"); exactly two tokens, else NotFound (as
    Clouddriver answers a name it cannot parse: no such manifest)."""
    tokens = raw.split()
    if len(tokens) != 2:
        raise NotFound(
            f'manifest {raw!r} not found: a name is "<kind> <name>", e.g. "deployment my-app"'
        )
    return resolve_kind(tokens[0]), tokens[1]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pod_specs(obj: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """The pod specs an object carries: a Pod's own, a workload's template, a CronJob's job's."""
    spec = _mapping(obj.get("spec"))
    if str(obj.get("kind", "")).lower() == "pod":
        yield spec
    template = _mapping(_mapping(spec.get("template")).get("spec"))
    if template:
        yield template
    job_template = _mapping(_mapping(_mapping(spec.get("jobTemplate")).get("spec")).get("template"))
    if job_template:
        yield _mapping(job_template.get("spec"))


def _split_image(image: str) -> tuple[str, str]:
    """`registry:5000/app:1.2` -> ("registry:5000/app", "1.2"); a digest is kept as the version."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1 :]
    return image, ""


def artifacts_of(obj: Mapping[str, Any], account: str) -> list[dict[str, Any]]:
    """The docker images of the object's containers (init containers too), first use first."""
    namespace = str(_mapping(obj.get("metadata")).get("namespace") or "")
    seen: set[str] = set()
    artifacts: list[dict[str, Any]] = []
    for pod_spec in _pod_specs(obj):
        for field in ("initContainers", "containers"):
            containers = pod_spec.get(field)
            if not isinstance(containers, list):
                continue
            for container in containers:
                image = _mapping(container).get("image")
                if not isinstance(image, str) or not image or image in seen:
                    continue
                seen.add(image)
                name, version = _split_image(image)
                artifacts.append(
                    {
                        "type": "docker/image",
                        "customKind": False,
                        "name": name,
                        "version": version,
                        "location": namespace,
                        "reference": image,
                        "metadata": {"account": account},
                    }
                )
    return artifacts


def _event_subject(event: Mapping[str, Any]) -> Mapping[str, Any]:
    # core/v1 Events name their object in involvedObject, events.k8s.io/v1 in regarding.
    return _mapping(event.get("involvedObject") or event.get("regarding"))


def _event_time(event: Mapping[str, Any]) -> str:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if isinstance(value, str) and value:
            return value
    series = _mapping(event.get("series")).get("lastObservedTime")
    if isinstance(series, str) and series:
        return series
    return str(_mapping(event.get("metadata")).get("creationTimestamp") or "")


def events_about(
    events: Iterable[Mapping[str, Any]], kind: str, name: str, namespace: str
) -> list[Mapping[str, Any]]:
    """The Events whose subject is (kind, name, namespace), oldest first, one per uid.

    Timestamps are RFC 3339 in UTC, so they order correctly as strings.
    """
    about: dict[str, Mapping[str, Any]] = {}
    for i, e in enumerate(events):
        subject = _event_subject(e)
        if (
            str(subject.get("kind", "")).lower() == kind.lower()
            and subject.get("name") == name
            and str(subject.get("namespace") or "") == namespace
        ):
            # The API server serves each Event as core/v1 and as events.k8s.io/v1 (same uid):
            # an agent watching both kinds would otherwise show it twice.
            uid = _mapping(e.get("metadata")).get("uid")
            about.setdefault(uid if isinstance(uid, str) and uid else f"#{i}", e)
    return sorted(about.values(), key=_event_time)


CRITERIA = ("newest", "second_newest", "oldest", "largest", "smallest")


def _created(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("creationTimestamp") or "")


_SEQUENCE_SUFFIX = re.compile(r"-v(\d{3,})$")


def age_key(obj: Mapping[str, Any]) -> tuple[str, int, str]:
    """Oldest first: creationTimestamp, then -- because the API server stamps whole seconds
    and a red/black deploys v001 within a second of v000 -- the version sequence (moniker
    annotation, else the ``-vNNN`` suffix), then the name."""
    meta = _mapping(obj.get("metadata"))
    name = str(meta.get("name") or "")
    raw = _mapping(meta.get("annotations")).get("moniker.spinnaker.io/sequence")
    sequence = -1
    if isinstance(raw, str) and raw.strip().isdigit():
        sequence = int(raw.strip())
    elif (found := _SEQUENCE_SUFFIX.search(name)) is not None:
        sequence = int(found.group(1))
    return _created(obj), sequence, name


def _replicas(obj: Mapping[str, Any]) -> int:
    value = _mapping(obj.get("spec")).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pick_by_criteria(
    objects: Sequence[Mapping[str, Any]], criteria: str
) -> Mapping[str, Any] | None:
    """Clouddriver's dynamic target selection; None when nothing fits (e.g. one object and
    second_newest). Raises BadRequest for an unknown criteria. Ties go to the newer object.
    """
    key = criteria.lower().replace("-", "_")
    if key not in CRITERIA:
        raise BadRequest(f"criteria {criteria!r} is not one of {', '.join(CRITERIA)}")
    by_age = sorted(objects, key=age_key)  # oldest first
    if not by_age:
        return None
    if key == "newest":
        return by_age[-1]
    if key == "second_newest":
        return by_age[-2] if len(by_age) >= 2 else None
    if key == "oldest":
        return by_age[0]
    newest_first = list(reversed(by_age))
    chosen: Mapping[str, Any]
    if key == "largest":
        chosen = max(newest_first, key=_replicas)
    else:
        chosen = min(newest_first, key=_replicas)
    return chosen
