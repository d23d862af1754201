"""Live agent sessions: who is connected, and a bounded outbound queue to each.

Other parts of the server (role changes, operations, dynamic accounts) reach an agent by
putting a ServerMessage on its session's outbound channel; the session's sender task is the
only writer to the gRPC stream. The channel is bounded (``sessions.outboundQueue``): a
session whose agent does not read its messages is ended rather than buffered without limit.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from wire import messages

from ._accounts import AccountService
from ._auth import Principal
from ._registry import Claim, Role, RoleChange
from ._shards import SEPARATOR, ShardSpec, account_of, spec_of, unit_name
from .store import AgentRecord, ResumePoint, Store

log = logging.getLogger("server.sessions")


@dataclass(frozen=True, slots=True)
class AgentView:
    """One connected session as /armory/agents shows it."""

    agent_id: str
    session_id: str
    instance_id: str
    agent_version: str
    peer: str
    accounts: dict[str, Role]
    connected_at_ms: int
    last_seen_ms: int


@dataclass(slots=True)
class Session:
    """One open Connect call. Created by SessionManager.open; the handler owns its lifetime.

    ``token`` is sent in the Welcome; an agent sends it back in its next Hello. It is a hint
    for logs only (which session an agent resumes), never a credential: every call is
    authenticated afresh by its bearer token or certificate. ``principal`` is who opened the
    call (what dynamic accounts it may be given)."""

    session_id: str
    token: str
    agent_id: str
    instance_id: str
    agent_version: str
    peer: str
    connected_at_ms: int
    outbound: trio.MemorySendChannel[messages.ServerMessage]
    outbox: trio.MemoryReceiveChannel[messages.ServerMessage]
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    last_seen_ms: int = 0
    declared: set[str] = field(default_factory=set)
    # The registry's name of each declared account this session serves a shard of
    # ("account/shard"); an account served whole is its own registry name.
    units: dict[str, str] = field(default_factory=dict)
    ended_reason: str = ""
    principal: Principal = field(default_factory=Principal)

    def post(self, message: messages.ServerMessage) -> bool:
        """Queue a message for the agent without waiting. When the queue is full the agent is
        not reading: the session is ended (False) rather than the caller blocked."""
        try:
            self.outbound.send_nowait(message)
            return True
        except trio.WouldBlock:
            self.end(f"its outbound queue of {self.outbound.statistics().max_buffer_size} is full")
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        return False

    def unit(self, account: str) -> str:
        """The registry's name for ``account`` as this session serves it."""
        return self.units.get(account, account)

    def end(self, reason: str) -> None:
        if not self.ended_reason:
            self.ended_reason = reason
            log.warning("ending session %s of agent %s: %s", self.session_id, self.agent_id, reason)
        self.cancel_scope.cancel()


def claim_from_info(info: messages.AccountInfo) -> Claim:
    """The registry's Claim for an AccountInfo; ValueError says what is wrong with it."""
    if not info.name or len(info.name) > 253:
        raise ValueError(f"account name {info.name[:60]!r} must be 1..253 characters")
    if SEPARATOR in info.name:
        raise ValueError(
            f"account name {info.name[:60]!r} must not contain {SEPARATOR!r} (it separates an "
            "account's name from its shard's)"
        )
    properties: dict[str, Any] = {}
    if info.properties_json:
        try:
            properties = json.loads(info.properties_json)
        except ValueError as exc:
            raise ValueError(f"account {info.name!r}: properties_json is not JSON: {exc}") from exc
        if not isinstance(properties, dict):
            raise ValueError(f"account {info.name!r}: properties_json must be a JSON object")
    permissions = properties.get("permissions") or {}
    if not isinstance(permissions, dict) or not all(
        isinstance(v, list) and all(isinstance(r, str) for r in v) for v in permissions.values()
    ):
        raise ValueError(f"account {info.name!r}: permissions must map READ/WRITE to role lists")
    shard = None
    if properties.get("shard") is not None:
        try:
            shard = ShardSpec.of(properties["shard"])
        except ValueError as exc:
            raise ValueError(f"account {info.name!r}: {exc}") from exc
    return Claim(
        name=unit_name(info.name, shard.name if shard else ""),
        shard=shard,
        kube_host=info.kube_host,
        cert_fingerprint=info.cert_fingerprint,
        kube_version=info.kube_version,
        properties=properties,
        permissions={str(k): list(v) for k, v in permissions.items()},
    )


class SessionManager:
    """The open sessions, their roles (through AccountService) and their outbound queues."""

    def __init__(
        self,
        accounts: AccountService,
        store: Store,
        *,
        server_id: str,
        now_ms: Callable[[], int],
        max_resumable_age_ms: int,
        outbound_queue: int,
    ) -> None:
        self.accounts = accounts
        self._store = store
        self._server_id = server_id
        self._now_ms = now_ms
        self._max_age_ms = max_resumable_age_ms
        self._queue = outbound_queue
        self._sessions: dict[str, Session] = {}
        self._close_listeners: list[Callable[[Session], None]] = []
        accounts.on_role_changes = self.deliver

    # -- lifetime -----------------------------------------------------------------------

    async def open(
        self, hello: messages.Hello, peer: str, principal: Principal | None = None
    ) -> Session:
        """Open a session for a validated Hello (accounts are registered separately).

        When writing its agent row fails (StoreError) or is cancelled, the session is
        forgotten again before the error propagates: nothing is left registered for a caller
        that never got the session to close."""
        send, receive = trio.open_memory_channel[messages.ServerMessage](self._queue)
        now = self._now_ms()
        session = Session(
            session_id=secrets.token_hex(8),
            token=secrets.token_urlsafe(24),
            agent_id=hello.agent_id,
            instance_id=hello.instance_id,
            agent_version=hello.agent_version,
            peer=peer,
            connected_at_ms=now,
            outbound=send,
            outbox=receive,
            last_seen_ms=now,
            principal=principal or Principal(),
        )
        self._sessions[session.session_id] = session
        self.accounts.registry.open_session(session.session_id, hello.agent_id)
        try:
            await self._store.upsert_agent(self._agent_record(session))
        except BaseException:
            self._sessions.pop(session.session_id, None)
            session.outbound.close()
            # No accounts are registered yet, so this announces no role changes.
            self.accounts.registry.close_session(session.session_id, now)
            raise
        return session

    def add_close_listener(self, listener: Callable[[Session], None]) -> None:
        """Have ``listener(session)`` called whenever a session closes.

        Called synchronously at the start of ``close`` (before any await, so also when the
        closing handler is being cancelled), after the session is gone from ``get`` and
        ``primary_session``. A listener must not block; one that raises is logged and the
        others still run.
        """
        self._close_listeners.append(listener)

    async def close(self, session: Session) -> None:
        """Forget the session: tell the close listeners, promote standbys, mark orphans,
        drop its agent row."""
        self._sessions.pop(session.session_id, None)
        session.outbound.close()
        for listener in self._close_listeners:
            try:
                listener(session)
            except Exception:  # one broken listener must not keep the session half closed
                log.exception("session %s: a close listener failed", session.session_id)
        changes = self.accounts.registry.close_session(session.session_id, self._now_ms())
        await self.accounts.changed(changes)
        await self._store.delete_agent(session.session_id)

    async def register(self, session: Session, claims: Sequence[Claim]) -> list[RoleChange]:
        """Register the accounts an agent declared; returns this session's decisions."""
        registry, now = self.accounts.registry, self._now_ms()
        # Another replica may have created, bound or removed these accounts.
        await self.accounts.refresh(c.name for c in claims)
        decisions = []
        promotions: list[RoleChange] = []
        # Registered and settled in one block: no other settle takes this session's heads.
        async with self.accounts.settling() as settle:
            for claim in claims:
                session.declared.add(claim.account)
                held = session.units.get(claim.account, claim.account)
                if held != claim.name:
                    # The agent serves another part of the account now (another shard, or
                    # all of it): it lets go of the part it held.
                    promotions += registry.unregister(session.session_id, held, now)
                if claim.name != claim.account:
                    session.units[claim.account] = claim.name
                else:
                    session.units.pop(claim.account, None)
                if registry.moved(session.session_id, claim):
                    # Same name, another cluster: the account (its cache and resume points)
                    # stays bound to the cluster it was registered with, so this session lets
                    # go of it (a standby of that cluster takes over) and the claim is judged
                    # afresh, which rejects it with the reason.
                    promotions += registry.unregister(session.session_id, claim.name, now)
                decisions.append(registry.register(session.session_id, claim, now))
            # With leases: a head is PRIMARY only once the store grants it the lease.
            settled = await settle()
        mine = {c.account: c for c in settled if c.session_id == session.session_id}
        promotions += [c for c in settled if c.session_id != session.session_id]
        decisions = [self._decided(d, mine) for d in decisions]
        if promotions:
            await self.accounts.changed(promotions)
        await self.accounts.persist()
        await self._store.upsert_agent(self._agent_record(session))
        return decisions

    def _decided(self, decision: RoleChange, settled: Mapping[str, RoleChange]) -> RoleChange:
        """The registry's ``decision`` once the leases are settled: granted (PRIMARY),
        refused (REJECTED), or a STANDBY told which replica holds the lease."""
        if decision.account in settled:
            return settled[decision.account]
        if decision.role is Role.STANDBY and not decision.reason:
            reason = self.accounts.standby_reason(decision.account)
            if reason and self.accounts.registry.head(decision.account) == decision.session_id:
                return replace(decision, reason=reason)
        return decision

    def count(self) -> int:
        """How many sessions are open."""
        return len(self._sessions)

    async def unregister(self, session: Session, names: Sequence[str]) -> None:
        changes: list[RoleChange] = []
        for name in names:
            session.declared.discard(name)
            unit = session.units.pop(name, name)
            changes += self.accounts.registry.unregister(session.session_id, unit, self._now_ms())
        await self.accounts.changed(changes)
        await self._store.upsert_agent(self._agent_record(session))

    def _agent_record(self, s: Session) -> AgentRecord:
        return AgentRecord(
            session_id=s.session_id,
            agent_id=s.agent_id,
            instance_id=s.instance_id,
            agent_version=s.agent_version,
            server_id=self._server_id,
            peer=s.peer,
            accounts=self.accounts.registry.session_accounts(s.session_id),
            connected_at_ms=s.connected_at_ms,
            last_seen_ms=s.last_seen_ms,
        )

    # -- roles and resume points --------------------------------------------------------

    async def assignment(self, change: RoleChange) -> messages.AccountAssignment:
        """The protocol's view of a decision; a PRIMARY gets its fresh-enough resume points."""
        resume: list[messages.ResumePoint] = []
        account = account_of(change.account)
        if change.role is Role.PRIMARY:
            now = self._now_ms()
            points: list[ResumePoint] = await self._store.resume_points(account)
            record = self.accounts.registry.get(change.account)
            shard = spec_of(record) if record is not None else None
            if shard is not None:  # the other shards' watches are not this agent's
                points = [p for p in points if shard.owns(p.kind, p.scope)]
            resume = [
                messages.ResumePoint(
                    api_version=p.api_version,
                    kind=p.kind,
                    scope=p.scope,
                    resource_version=p.resource_version,
                    age_ms=p.age_ms(now),
                )
                for p in points
                if p.age_ms(now) < self._max_age_ms
            ]
        return messages.AccountAssignment(
            name=account,
            role=messages.Role(int(change.role)),
            reason=change.reason,
            resume=resume,
        )

    async def deliver(self, changes: Sequence[RoleChange]) -> None:
        """Send each affected session one Assignment with its changed roles."""
        by_session: dict[str, list[RoleChange]] = {}
        for change in changes:
            by_session.setdefault(change.session_id, []).append(change)
        for session_id, group in by_session.items():
            session = self._sessions.get(session_id)
            if session is None:
                continue
            assignments = [await self.assignment(c) for c in group]
            for c in group:
                log.info(
                    "session %s: account %s is now %s %s",
                    session_id,
                    c.account,
                    c.role.name,
                    c.reason,
                    extra={"account": c.account},
                )
            session.post(
                messages.ServerMessage(assignment=messages.Assignment(accounts=assignments))
            )

    # -- what the REST API and operations use -------------------------------------------

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def agents(self) -> list[AgentView]:
        registry = self.accounts.registry
        views = []
        for s in self._sessions.values():
            roles = {}
            for name in registry.session_accounts(s.session_id):
                role = registry.role(s.session_id, name)
                if role is not None:
                    roles[name] = role
            views.append(
                AgentView(
                    s.agent_id,
                    s.session_id,
                    s.instance_id,
                    s.agent_version,
                    s.peer,
                    roles,
                    s.connected_at_ms,
                    s.last_seen_ms,
                )
            )
        return sorted(views, key=lambda v: (v.agent_id, v.connected_at_ms))

    async def disconnect(self, agent_id: str) -> int:
        """End every session of ``agent_id`` (POST /armory/agent/{id}/disconnect)."""
        ended = [s for s in self._sessions.values() if s.agent_id == agent_id]
        for session in ended:
            session.end("disconnected by an operator")
        return len(ended)

    def primary_session(self, account: str) -> Session | None:
        session_id = self.accounts.registry.primary(account)
        return self._sessions.get(session_id) if session_id else None

    async def send_operation(self, account: str, operation: messages.Operation) -> str | None:
        """Queue an operation for the account's PRIMARY; its agent id, or None if none."""
        session = self.primary_session(account)
        if session is None or not session.post(messages.ServerMessage(operation=operation)):
            return None
        return session.agent_id

    async def push_dynamic_account(self, definition: Mapping[str, Any]) -> str | None:
        """Send a dynamic account definition to the least loaded agent allowed to serve it;
        its id, or None when no connected agent is.

        The definition carries cluster credentials, so it only goes to a session whose
        principal may register the account's name (its token's ``accounts`` claim): the same
        rule that would let that agent announce the account. It travels as an Operation of
        type ``dynamicAccount`` whose payload is the definition.
        """
        name = str(definition.get("name", ""))
        allowed = [
            s
            for s in self._sessions.values()
            if not s.ended_reason and s.principal.may_register(name)
        ]
        if not name or not allowed:
            return None
        registry = self.accounts.registry
        session = min(
            allowed,
            key=lambda s: (len(registry.session_accounts(s.session_id)), s.connected_at_ms),
        )
        operation = messages.Operation(
            id=f"dynamic-{secrets.token_hex(8)}",
            account=name,
            type="dynamicAccount",
            payload_json=json.dumps(definition),
        )
        if not session.post(messages.ServerMessage(operation=operation)):
            return None
        return session.agent_id
