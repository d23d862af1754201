"""Who is calling, and may they: bearer tokens, client certificates, per-kind verb grants.

A :class:`User` grants verbs per resource name (``"pods"``, ``"deployments.apps"`` or ``"*"``);
the most specific entry wins, so ``{"*": ALL_VERBS, "secrets": ()}`` is "everything but
Secrets". Anonymous requests are refused (401) except the health probes.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubesim._resources import VERBS, ResourceType

__all__ = ["ALL_VERBS", "READ_VERBS", "User", "Users"]

ALL_VERBS: frozenset[str] = frozenset(VERBS)
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

    def allows(self, verb: str, rtype: ResourceType) -> bool:
        qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
        for key in (qualified, rtype.plural, "*"):
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

    def by_token(self, token: str) -> User | None:
        return self._by_token.get(token)

    def by_cert_name(self, common_name: str) -> User | None:
        return self._by_name.get(common_name)
