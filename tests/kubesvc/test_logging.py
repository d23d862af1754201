"""Log lines for people and for pipelines (kubesvc/_logging.py): the JSON line's fields, the
text line's ``[account]``, and the account carried by every line written from inside an
account's tasks (agent/_log_context.py, server/_log_context.py) and by nothing else."""

from __future__ import annotations

import datetime
import io
import json
import logging
from collections.abc import Iterator

import pytest
import trio

import agent
import server
from kubesvc._logging import (
    ContextFilter,
    JsonFormatter,
    TextFormatter,
    chosen_format,
    default_log_format,
    failure_line,
)


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("agent.kube", logging.WARNING, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


class _Lines:
    """A handler of our own with the filter, as configure_logging sets it, on a buffer."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self.buffer = io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)
        self.handler.setFormatter(formatter)
        self.handler.addFilter(ContextFilter((agent.log_context, server.log_context)))
        self.logger = logging.getLogger("tests.logging")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def __enter__(self) -> _Lines:
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = True

    def lines(self) -> list[str]:
        return self.buffer.getvalue().splitlines()

    def json(self) -> list[dict[str, str]]:
        return [json.loads(line) for line in self.lines()]


@pytest.fixture
def as_json() -> Iterator[_Lines]:
    with _Lines(JsonFormatter({"cluster": "eu-1"})) as lines:
        yield lines


@pytest.fixture
def as_text() -> Iterator[_Lines]:
    with _Lines(TextFormatter()) as lines:
        yield lines


def test_a_json_line_has_time_level_logger_message_context_and_fields(as_json: _Lines) -> None:
    with agent.account_logs("prod-1"):
        as_json.logger.info("GET %s: 503; retrying in %.1f s", "/apis", 1.5)
    [line] = as_json.json()
    assert line["level"] == "info"
    assert line["logger"] == "tests.logging"
    assert line["message"] == "GET /apis: 503; retrying in 1.5 s"
    assert line["account"] == "prod-1"
    assert line["cluster"] == "eu-1"  # the operator's fixed fields (logging.fields)
    assert "exception" not in line
    # RFC 3339 in UTC, with milliseconds: what log pipelines parse without a pattern.
    assert line["time"].endswith("Z")
    assert len(line["time"]) == len("2024-01-01T00:00:00.000Z")
    moment = datetime.datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert moment.utcoffset() == datetime.timedelta(0)
    now = datetime.datetime.now(datetime.UTC)
    assert abs((now - moment).total_seconds()) < 60


def test_a_json_line_carries_the_exception_as_a_field(as_json: _Lines) -> None:
    try:
        raise ValueError("bad value\non two lines")
    except ValueError:
        as_json.logger.exception("operation %s failed", "op-1")
    [line] = as_json.json()  # one line, whatever the traceback holds
    assert line["level"] == "error"
    assert line["message"] == "operation op-1 failed"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "ValueError: bad value\non two lines" in line["exception"]


def test_the_operators_fields_never_replace_ours() -> None:
    formatter = JsonFormatter({"message": "x", "level": "y", "team": "sre"})
    line = json.loads(formatter.format(_record("hello")))
    assert (line["message"], line["level"], line["team"]) == ("hello", "warning", "sre")


def test_a_json_line_without_context_has_no_empty_fields(as_json: _Lines) -> None:
    as_json.logger.info("nothing about an account")
    [line] = as_json.json()
    assert not {"account", "agent", "replica"} & set(line)


def test_the_text_line_names_the_account_once(as_text: _Lines) -> None:
    with agent.account_logs("prod-1"):
        as_text.logger.info("GET /apis: 503 from 10.0.0.1:6443; retrying in 1.0 s")
        as_text.logger.info("account %s: cluster %s", "prod-1", "10.0.0.1")  # an argument
        as_text.logger.info("operation op-1 on %s failed", "prod-1")  # an argument too
        as_text.logger.info("account prod-1: 10.0.0.1: GOAWAY")  # in the text
        as_text.logger.info("account prod-10: not this one")  # another account's name
    as_text.logger.info("no account here")
    lines = [line.split(" ", 2)[2] for line in as_text.lines()]  # without the time
    assert lines == [
        "INFO    tests.logging [prod-1]: GET /apis: 503 from 10.0.0.1:6443; retrying in 1.0 s",
        "INFO    tests.logging: account prod-1: cluster 10.0.0.1",
        "INFO    tests.logging: operation op-1 on prod-1 failed",
        "INFO    tests.logging: account prod-1: 10.0.0.1: GOAWAY",
        "INFO    tests.logging [prod-1]: account prod-10: not this one",
        "INFO    tests.logging: no account here",
    ]


def test_an_explicit_account_wins_over_the_context(as_json: _Lines) -> None:
    with agent.account_logs("a"):
        as_json.logger.info("about b", extra={"account": "b"})
    assert as_json.json()[0]["account"] == "b"


async def test_tasks_started_inside_an_account_carry_it_and_no_other_task_does(
    as_json: _Lines,
) -> None:
    """trio copies the spawning task's context into each new task: what an account's task
    starts (here two levels down, from a nursery opened outside) names the account; its
    sibling, another account's task and the test's own task do not."""
    spawned = trio.Event()

    async def leaf(what: str) -> None:
        await trio.lowlevel.checkpoint()
        as_json.logger.info(what)

    async def account_task(name: str, nursery: trio.Nursery) -> None:
        with agent.account_logs(name):
            async with trio.open_nursery() as inner:
                inner.start_soon(leaf, f"inside {name}")
            nursery.start_soon(leaf, f"started by {name} in an outer nursery")
            spawned.set()
        as_json.logger.info(f"{name} after its block")

    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            outer.start_soon(account_task, "a", outer)
            outer.start_soon(account_task, "b", outer)
            outer.start_soon(leaf, "a sibling")
            await spawned.wait()
            with server.replica_logs("r-1"):
                as_json.logger.info("the server's")
    carried = {line["message"]: line.get("account") for line in as_json.json()}
    assert carried == {
        "inside a": "a",
        "inside b": "b",
        "started by a in an outer nursery": "a",
        "started by b in an outer nursery": "b",
        "a after its block": None,
        "b after its block": None,
        "a sibling": None,
        "the server's": None,
    }
    [replica] = [line for line in as_json.json() if line["message"] == "the server's"]
    assert replica["replica"] == "r-1"


def test_the_format_comes_from_the_flag_then_the_environment_then_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBESVC_LOG_FORMAT", raising=False)
    assert chosen_format(None, "json") == "json"
    assert chosen_format(None) == "text"
    monkeypatch.setenv("KUBESVC_LOG_FORMAT", "JSON")
    assert chosen_format(None, "text") == "json"
    assert chosen_format("text", "json") == "text"
    monkeypatch.setenv("KUBESVC_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="KUBESVC_LOG_FORMAT must be one of text, json"):
        default_log_format()


def test_the_clis_last_word_follows_the_format(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubesvc import _logging

    monkeypatch.delenv("KUBESVC_LOG_FORMAT", raising=False)
    monkeypatch.setattr(_logging, "_format", "json")
    line = json.loads(failure_line("ConfigError: kubesvc.yaml: bad"))
    assert (line["level"], line["message"]) == ("critical", "ConfigError: kubesvc.yaml: bad")
    monkeypatch.setattr(_logging, "_format", "text")
    assert failure_line("x", "json") == "kubesvc: error: x"  # configured wins
    # Failed before logging was set up (a config file that does not load): the flag, else
    # the environment decide.
    monkeypatch.setattr(_logging, "_format", None)
    assert json.loads(failure_line("x", "json"))["message"] == "x"
    assert failure_line("x") == "kubesvc: error: x"
    monkeypatch.setenv("KUBESVC_LOG_FORMAT", "json")
    assert json.loads(failure_line("x"))["message"] == "x"
