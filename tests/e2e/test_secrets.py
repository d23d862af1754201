"""No byte of any Secret's data crosses the wire, however the Secret was written."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import trio

import kubesim

from .harness import open_receiver_stack, wait_until
from .receiver import Receiver, object_states

# Distinctive values: if any of them (or their base64) shows up in a payload, data leaked.
PLAIN = ["s3cr3t-password-alpha", "s3cr3t-token-bravo", "s3cr3t-late-charlie"]


def _secret(name: str, value: str) -> dict[str, Any]:
    encoded = base64.b64encode(value.encode()).decode()
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "data": {"password": encoded},
    }
    # kubectl apply keeps the whole applied object, data included, in this annotation.
    applied = json.dumps(body)
    body["metadata"] = {
        "name": name,
        "namespace": "default",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied},
    }
    body["stringData"] = {"other": value}
    return body


async def test_secret_data_never_reaches_the_stream(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    sim.create(_secret("alpha", PLAIN[0]))
    sim.create(_secret("bravo", PLAIN[1]))
    receiver = Receiver()
    with trio.fail_after(30):
        async with open_receiver_stack(tmp_path, receiver, sim=sim) as stack:

            async def has(name: str) -> bool:
                return ("v1", "Secret", "default", name) in object_states(receiver, "k1")

            await wait_until(lambda: has("bravo"))
            sim.create(_secret("charlie", PLAIN[2]))
            secret = sim.get("", "v1", "secrets", "default", "alpha")
            secret["data"] = {"password": base64.b64encode(b"s3cr3t-changed-delta").decode()}
            sim.update(secret)
            updated = sim.get("", "v1", "secrets", "default", "alpha")["metadata"][
                "resourceVersion"
            ]

            def alpha_updated() -> bool:
                body = object_states(receiver, "k1").get(("v1", "Secret", "default", "alpha"))
                return (
                    body is not None and json.loads(body)["metadata"]["resourceVersion"] == updated
                )

            await wait_until(lambda: has("charlie"))
            await wait_until(alpha_updated, what="the update of alpha arrived")
            stack.nursery.cancel_scope.cancel()

    wire_bytes = b"".join(receiver.payloads)
    assert wire_bytes, "nothing was captured"
    for value in [*PLAIN, "s3cr3t-changed-delta"]:
        assert value.encode() not in wire_bytes
        assert base64.b64encode(value.encode()) not in wire_bytes
    assert b"last-applied-configuration" not in wire_bytes
    for key, raw in object_states(receiver, "k1").items():
        if key[1] == "Secret":
            body = json.loads(raw)
            assert "data" not in body, key
            assert "stringData" not in body, key
