"""The agent process: config -> budget -> accounts -> link, plus live reload.

``run_agent`` is the whole agent as one trio task. It must run inside ``wire.open_loop()``
(the composition root opens it once), because the link speaks gRPC through the bridge.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import trio

from budget import ByteBudget
from wire import messages

from ._accounts import AccountSet
from ._backoff import Backoff
from ._errors import ConfigError
from ._health import health_app, metrics_app, serve_http
from ._log_context import account_logs, agent_logs
from ._metrics import metrics_registry
from ._pacing import unpaced
from ._status import AgentStatus
from .config import ClouddriverConfig, Config, load_config, watch_config
from .link import Link, LinkSettings, ServerAddress, TokenSource
from .operations import OperationExecutor, OperationSettings

log = logging.getLogger("agent")

#: The Operation type the server uses to push a dynamic account definition.
DYNAMIC_ACCOUNT = "dynamicAccount"


@dataclass(slots=True)
class Agent:
    """The running agent's parts, for the admin views, the metrics and the tests."""

    config: Config
    budget: ByteBudget
    accounts: AccountSet
    link: Link
    status: AgentStatus
    health_port: int | None = None
    metrics_port: int | None = None


def agent_version() -> str:
    try:
        return version("kubesvc")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def parse_grpc_address(address: str, path: str = "clouddriver.grpc") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) from ``clouddriver.grpc`` (or the option at
    ``path``); raises ConfigError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"expected host:port, got {address!r}", path=path)
    return host.strip("[]"), int(port)


def server_addresses(clouddriver: ClouddriverConfig) -> tuple[ServerAddress, ...]:
    """The server addresses the link dials in turn: ``clouddriver.grpcAddresses``, else
    ``clouddriver.grpc`` alone; raises ConfigError naming the bad entry."""
    if not clouddriver.grpc_addresses:
        return (ServerAddress(*parse_grpc_address(clouddriver.grpc)),)
    return tuple(
        ServerAddress(*parse_grpc_address(address, f"clouddriver.grpcAddresses[{index}]"))
        for index, address in enumerate(clouddriver.grpc_addresses)
    )


def client_ssl_context(clouddriver: ClouddriverConfig) -> ssl.SSLContext | None:
    """The TLS context for the server from ``clouddriver.tls`` (None when ``insecure``)."""
    if clouddriver.insecure:
        return None
    tls = clouddriver.tls
    try:
        context = ssl.create_default_context(cafile=tls.cacert_file)
        if tls.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if tls.client_cert_file:
            context.load_cert_chain(
                tls.client_cert_file,
                tls.client_key_file,
                password=tls.client_key_file_password,
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files: {exc}", path="clouddriver.tls") from exc
    return context


def agent_id(environ: Mapping[str, str] = os.environ) -> str:
    """The agent's id: the pod's name, else the host's."""
    return environ.get("POD_NAME") or socket.gethostname()


def link_settings(config: Config, *, environ: Mapping[str, str] = os.environ) -> LinkSettings:
    clouddriver = config.clouddriver
    addresses = server_addresses(clouddriver)
    backoff = clouddriver.backoff
    return LinkSettings(
        host=addresses[0].host,
        port=addresses[0].port,
        addresses=addresses,
        agent_id=agent_id(environ),
        instance_id=uuid.uuid4().hex,
        agent_version=agent_version(),
        ssl_context=client_ssl_context(clouddriver),
        server_hostname=clouddriver.tls.server_name,
        heartbeat_seconds=float(clouddriver.keep_alive_heartbeat_seconds),
        heartbeat_timeout_seconds=float(max(clouddriver.keep_alive_time_out_seconds, 1)),
        welcome_timeout_seconds=max(config.kubernetes.reconnect_timeout_ms / 1000, 1.0) * 6,
        backoff=Backoff(
            base=backoff.base_delay,
            multiplier=backoff.multiplier,
            jitter=backoff.jitter,
            max_delay=backoff.max_delay,
        ),
    )


def build_agent(config: Config, *, environ: Mapping[str, str] = os.environ) -> Agent:
    """Wire the agent's parts from a validated config (no I/O yet)."""
    budget = ByteBudget(config.budget.bytes)
    accounts = AccountSet(config, environ=environ)
    executor = OperationExecutor(
        accounts.client_for,
        settings=OperationSettings(
            server_side_apply=config.kubernetes.server_side_apply,
            strip_managed_fields=config.kubernetes.strip_managed_fields,
        ),
    )
    link = Link(
        link_settings(config, environ=environ),
        budget,
        hello_accounts=accounts.hello_accounts,
        runner=accounts.run_watches,
        max_resume_age_ms=accounts.max_resume_age_ms,
        token=TokenSource(config.clouddriver.auth).token,
        operations=functools.partial(_run_operation, accounts, executor),
    )
    accounts.on_change = link.accounts_changed  # accounts found or removed -> tell the server
    status = AgentStatus(link=link.status, accounts=accounts.accounts, budget=budget.statistics)
    executor.status = status  # the /operations view lists what it ran
    return Agent(config=config, budget=budget, accounts=accounts, link=link, status=status)


async def _run_operation(
    accounts: AccountSet, executor: OperationExecutor, operation: messages.Operation
) -> messages.OperationResult:
    """Dynamic accounts are the agent's own business; everything else goes to Kubernetes,
    not paced (agent/_pacing.py): the operation's round trips are not delayed. (A dynamic
    account makes none; its watches' lists are not paced either.)"""
    if operation.type != DYNAMIC_ACCOUNT:
        # The operation's lines name its account.
        with account_logs(operation.account), unpaced():
            return await executor(operation)
    try:
        definition = json.loads(operation.payload_json)
        if not isinstance(definition, dict):
            raise ConfigError("expected a JSON object (a kubernetes.accounts[] entry)")
        done = await accounts.add_dynamic(definition)
    except (ValueError, ConfigError) as exc:
        return messages.OperationResult(
            id=operation.id,
            account=operation.account,
            ok=False,
            error_code="Invalid",
            error_message=f"dynamic account: {exc}",
        )
    return messages.OperationResult(
        id=operation.id,
        account=operation.account,
        ok=True,
        result_json=json.dumps(
            {"result": {"message": done}, "phases": [], "objects": [], "deleted": []}
        ),
    )


async def run_agent(
    config_path: str,
    *,
    environ: Mapping[str, str] = os.environ,
    reload_poll_seconds: float = 1.0,
    stop: trio.Event | None = None,
    task_status: trio.TaskStatus[Agent] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the agent from its config file until cancelled; reload the file when it changes.

    When ``stop`` is set (SIGTERM), drain (see :func:`drain_agent`) and return. Raises
    ConfigError when the first load fails; a later invalid file is logged and the running
    config kept.
    """
    config = await trio.to_thread.run_sync(load_config, config_path)
    agent = build_agent(config, environ=environ)

    async def reload(new: Config) -> None:
        log.info("config %s changed: applying it", config_path)
        agent.config = new
        await agent.accounts.update(new)

    def report(error: ConfigError) -> None:
        log.error("config %s is invalid, keeping the running config: %s", config_path, error)

    # Every line of this agent's tasks carries its id (the one Hello announces).
    with agent_logs(agent_id(environ)):
        async with trio.open_nursery() as nursery:
            agent.health_port = await nursery.start(
                functools.partial(
                    serve_http,
                    health_app(agent.status),
                    config.server.host,
                    config.server.port,
                    ssl=config.server.ssl,
                )
            )
            if config.prometheus.enabled:
                registry = metrics_registry(agent.status)
                agent.metrics_port = await nursery.start(
                    serve_http, metrics_app(registry), config.server.host, config.prometheus.port
                )
            await nursery.start(agent.accounts.run)
            await nursery.start(agent.link.run)
            await nursery.start(
                lambda task_status: watch_config(
                    config_path,
                    reload,
                    on_error=report,
                    poll_interval=reload_poll_seconds,
                    task_status=task_status,
                )
            )
            task_status.started(agent)
            if stop is not None:
                await stop.wait()
                await drain_agent(agent)
                nursery.cancel_scope.cancel()


async def drain_agent(agent: Agent) -> None:
    """Drain for a shutdown within ``shutdown.drainSeconds``: no new watch data, what the
    agent holds sent and acknowledged, running operations finished or ended with a
    retryable failure, the stream closed (agent/link/_drain.py). Past the bound it
    gives up and logs what was left; the caller then cancels the agent."""
    bound = agent.config.shutdown.drain_seconds
    log.info("shutdown: draining (at most %g s)", bound)
    start = trio.current_time()
    # Not paced (agent/_pacing.py): each of the drain's round trips would wait the delay.
    with trio.move_on_at(start + bound) as scope, unpaced():
        await agent.link.drain(start + bound)
    if scope.cancelled_caught:
        unacked, running = agent.link.draining_statistics()
        log.warning(
            "shutdown: the drain did not finish within %g s (%d batches unacknowledged, "
            "%d operations running): stopping now; the next start resumes from what the "
            "server acknowledged",
            bound,
            unacked,
            running,
        )
    else:
        log.info("shutdown: drained in %.1f s", trio.current_time() - start)
