"""Who is calling, and may they: bearer tokens, client certificates, per-kind verb grants.

A :class:`User` grants verbs per resource name (``"pods"``, ``"deployments.apps"`` or ``"*"``),
and per namespace with the namespace in front (``"team-b/pods"``, as a RoleBinding in that
namespace would); the most specific entry wins, so ``{"*": ALL_VERBS, "secrets": ()}`` is
"everything but Secrets" and ``{"*": ALL_VERBS, "b/pods": ()}`` "everything but Pods in
namespace b". Grants can change while clients run (``Users.set_grants``): what is already
being served (an open watch) goes on, as on a real API server, and the next request is judged
anew. Anonymous requests are refused (401) except the health probes.

A user's token may expire (``User.expires_at``, wall-clock epoch seconds): from then on it is
refused with 401, as a real API server refuses an expired service-account or OIDC token
(kubectl's "You must be logged in to the server (Unauthorized)").
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from kubesim._resources import VERBS, ResourceType

__all__ = ["ALL_VERBS", "READ_VERBS", "VERBS_ANY", "User", "Users"]

ALL_VERBS: frozenset[str] = frozenset(VERBS)
#: What a grant may list: any verb, or "*".
VERBS_ANY: frozenset[str] = ALL_VERBS | {"*"}
READ_VERBS: frozenset[str] = frozenset({"get", "list", "watch"})


@dataclass(frozen=True, slots=True)
class User:
    """A user known to the simulated API server and the verbs it may use per resource."""

    name: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    grants: Mapping[str, frozenset[str] | tuple[str, ...]] = field(
        default_factory=lambda: {"*": ALL_VERBS}
    )
    groups: tuple[str, ...] = ("system:authenticated",)
    #: When the token stops being accepted (epoch seconds, wall clock); None: never.
    expires_at: float | None = None

    def expired(self, now: float | None = None) -> bool:
        """Whether the token is past ``expires_at`` (``now`` defaults to the wall clock)."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at

    def allows(self, verb: str, rtype: ResourceType, namespace: str | None = None) -> bool:
        return self.allows_resource(verb, rtype.group, rtype.plural, namespace)

    def allows_resource(
        self, verb: str, group: str, plural: str, namespace: str | None = None
    ) -> bool:
        """Whether ``verb`` on ``plural`` of API ``group`` (in ``namespace``) is granted; what
        requests and SelfSubjectAccessReviews are both judged by."""
        qualified = f"{plural}.{group}" if group else plural
        keys: tuple[str, ...] = (qualified, plural, "*")
        if namespace:
            keys = (f"{namespace}/{qualified}", f"{namespace}/{plural}", *keys)
        for key in keys:
            if key in self.grants:
                verbs = self.grants[key]
                return verb in verbs or "*" in verbs
        return False

    @property
    def is_admin(self) -> bool:
        """May use the admin endpoint (faults, counters): needs every verb on everything."""
        verbs = self.grants.get("*", ())
        return "*" in verbs or set(verbs) >= ALL_VERBS


class Users:
    """The users, found by bearer token or by client-certificate common name."""

    def __init__(self, users: list[User] | None = None) -> None:
        self._by_name: dict[str, User] = {}
        self._by_token: dict[str, User] = {}
        for user in users if users is not None else [User("admin")]:
            self.add(user)

    def add(self, user: User) -> User:
        old = self._by_name.pop(user.name, None)
        if old is not None:
            self._by_token.pop(old.token, None)
        self._by_name[user.name] = user
        self._by_token[user.token] = user
        return user

    def __getitem__(self, name: str) -> User:
        return self._by_name[name]

    def set_grants(self, name: str, grants: Mapping[str, Iterable[str]]) -> User:
        """Give ``name`` these grants instead (its token and certificate name stay): RBAC
        edited while its clients run. Raises KeyError for an unknown user."""
        old = self._by_name[name]
        return self.add(replace(old, grants={k: frozenset(v) for k, v in grants.items()}))

    def by_token(self, token: str) -> User | None:
        return self._by_token.get(token)

    def by_cert_name(self, common_name: str) -> User | None:
        return self._by_name.get(common_name)
