"""AddressRotation, the link's choice of the next server address (agent/link/_rotation.py): a
failure moves to the next address at once, the backoff comes once per round of failures, a
Welcome or a drain starts a round over. Plain objects, no event loop."""

from __future__ import annotations

import pytest

from agent import Backoff, ConfigError, link_settings, parse_config
from agent.link._rotation import AddressRotation, ServerAddress

A, B, C = ServerAddress("a", 9091), ServerAddress("b", 9091), ServerAddress("c", 9092)


def _dials(rotation: AddressRotation, outcomes: str) -> list[tuple[ServerAddress, str]]:
    """Drive ``rotation`` as the link does: for each outcome (f = failed, w = Welcome then a
    broken stream, d = Welcome then a drain) the address dialled and what came next
    (``at once``, ``backoff`` or ``drain``)."""
    seen = []
    for outcome in outcomes:
        address = rotation.current
        if outcome == "d":
            rotation.connected()
            rotation.drained()
            seen.append((address, "drain"))
            continue
        if outcome == "w":
            rotation.connected()
        seen.append((address, "backoff" if rotation.failed() else "at once"))
    return seen


def test_one_address_backs_off_after_every_failure_as_before() -> None:
    rotation = AddressRotation([A])
    assert _dials(rotation, "ffwf") == [(A, "backoff")] * 4


def test_failures_move_round_robin_and_back_off_once_per_round() -> None:
    rotation = AddressRotation([A, B, C])
    assert _dials(rotation, "ffffff") == [
        (A, "at once"),
        (B, "at once"),
        (C, "backoff"),
        (A, "at once"),
        (B, "at once"),
        (C, "backoff"),
    ]


def test_a_welcome_starts_the_round_over_from_the_address_that_gave_it() -> None:
    rotation = AddressRotation([A, B])
    # A fails, B welcomes and its stream later breaks: A is tried at once (a new round began
    # at B); A fails too, which completes the round (B broke, A failed): the backoff, then B.
    assert _dials(rotation, "fwff") == [
        (A, "at once"),
        (B, "at once"),
        (A, "backoff"),
        (B, "at once"),
    ]


def test_a_drain_moves_to_the_next_address_and_begins_a_fresh_round() -> None:
    rotation = AddressRotation([A, B])
    assert _dials(rotation, "dff") == [(A, "drain"), (B, "at once"), (A, "backoff")]
    assert rotation.current == B


def test_the_backoff_grows_per_round_not_per_address() -> None:
    """With two dead addresses the delays are base, base*m, ... one per round: the same
    schedule as one dead address, not twice as fast to the cap."""
    rotation = AddressRotation([A, B])
    backoff = Backoff(base=1.0, multiplier=2.0, jitter=0.0, max_delay=60.0)
    waits = [backoff.next_delay() if rotation.failed() else 0.0 for _ in range(8)]
    assert waits == [0.0, 1.0, 0.0, 2.0, 0.0, 4.0, 0.0, 8.0]


def test_no_address_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        AddressRotation([])


def test_ipv6_hosts_are_bracketed_in_logs() -> None:
    assert str(ServerAddress("::1", 9091)) == "[::1]:9091"
    assert str(A) == "a:9091"


# -- the config ---------------------------------------------------------------------------


def test_grpc_addresses_give_the_links_addresses_in_order() -> None:
    config = parse_config(
        "clouddriver:\n  grpcAddresses: [a.example:9091, '[fd00::1]:9091', b.example:443]\n",
        source="kubesvc.yaml",
    )
    assert config.ignored_options == ()
    settings = link_settings(config, environ={})
    assert settings.server_addresses() == (
        ServerAddress("a.example", 9091),
        ServerAddress("fd00::1", 9091),
        ServerAddress("b.example", 443),
    )
    assert (settings.host, settings.port) == ("a.example", 9091)


def test_the_single_address_setting_still_works() -> None:
    config = parse_config("clouddriver:\n  grpc: one.example:9091\n", source="kubesvc.yaml")
    settings = link_settings(config, environ={})
    assert settings.server_addresses() == (ServerAddress("one.example", 9091),)


def test_both_forms_at_once_is_an_error_naming_the_option() -> None:
    text = "clouddriver:\n  grpc: a:9091\n  grpcAddresses: [a:9091, b:9091]\n"
    with pytest.raises(ConfigError, match="not both") as caught:
        parse_config(text, source="kubesvc.yaml")
    assert "clouddriver.grpcAddresses" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("grpcAddresses: [a:9091, b]", "clouddriver.grpcAddresses[1]"),
        ("grpcAddresses: [a:9091, '']", "clouddriver.grpcAddresses[1]"),
        ("grpcAddresses: a:9091", "clouddriver.grpcAddresses"),
    ],
)
def test_a_bad_address_names_its_entry(text: str, where: str) -> None:
    def load() -> None:
        link_settings(parse_config(f"clouddriver:\n  {text}\n", source="kubesvc.yaml"), environ={})

    with pytest.raises(ConfigError) as caught:
        load()
    assert where in str(caught.value)
