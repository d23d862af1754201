"""Operation results the link sends: one too large for the server's messages is reported as a
failure instead of being retried (with the results behind it) by every session."""

from __future__ import annotations

from agent.link._link import reportable
from wire import messages
from wire._envelope import encode_operation_result


def test_a_result_that_fits_goes_as_it_is() -> None:
    result = messages.OperationResult(id="op-1", account="k1", ok=True, result_json="{}")
    assert reportable(result, 4 * 2**20) is result


def test_a_result_too_large_for_a_message_becomes_a_failure_that_says_so() -> None:
    big = messages.OperationResult(id="op-2", account="k1", ok=True, result_json="x" * 300_000)
    limit = 256 * 1024
    reported = reportable(big, limit)
    assert (reported.id, reported.account, reported.ok) == ("op-2", "k1", False)
    assert reported.error_code == "ResultTooLarge"
    assert "the operation ran" in reported.error_message
    assert f"({limit} bytes)" in reported.error_message
    assert len(encode_operation_result(reported)) < 1024


def test_the_reckoning_never_lets_through_a_result_the_wire_would_refuse() -> None:
    # Around the edge: what reportable lets through always fits once encoded and framed.
    result = messages.OperationResult(id="op", account="k1", ok=True, result_json="é" * 1000)
    passed = refused = 0
    for limit in range(1950, 2150):
        if reportable(result, limit) is result:
            passed += 1
            assert len(encode_operation_result(result)) + 5 <= limit
        else:
            refused += 1
    assert passed  # both sides of the edge were tried
    assert refused
