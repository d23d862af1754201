"""An agent in miniature, written from docs/protocol.md alone: run as its own process by
tests/wire/test_protocol_doc.py.

It imports nothing of kubesvc: grpcio with stubs that protoc generated from wire/kubesvc.proto
(their folder is the first argument) and msgspec's msgpack for the event records, built by
hand as §6 describes. It says Hello, expects a Welcome with the account PRIMARY, sends two
EventBatches (a listing of two ConfigMaps, then a relist without one of them) and expects their
Acks, sends a Heartbeat and
expects one back, half-closes and expects the call to end with OK. It prints what it received
as one JSON line and exits 0, or raises (exit 1) saying what went wrong.

    python tests/wire/_doc_client.py <stub folder> <host:port> <bearer token>
"""

from __future__ import annotations

import importlib
import json
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import msgspec

CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "app", "namespace": "shop", "uid": "u1", "resourceVersion": "42"},
    "data": {"color": "blue"},
}


def configmap(name: str, resource_version: str) -> list[Any]:
    """§6: [type, account, api_version, kind, namespace, name, uid, resource_version, object
    (bin), scope]: an ADDED ConfigMap seen by a cluster-wide watch."""
    obj = {**CONFIGMAP, "metadata": {**CONFIGMAP["metadata"], "name": name, "uid": f"u-{name}"}}
    obj["metadata"]["resourceVersion"] = resource_version
    body = json.dumps(obj).encode()
    return [1, "prod", "v1", "ConfigMap", "shop", name, f"u-{name}", resource_version, body, ""]


def listing(*objects: list[Any], version: str) -> bytes:
    """§7.1: SYNC_BEGIN, the listed objects, SYNC_END with the list's resourceVersion."""
    begin = [5, "prod", "v1", "ConfigMap", "", "", "", "", b"", ""]
    end = [6, "prod", "v1", "ConfigMap", "", "", "", version, b"", ""]
    return msgspec.msgpack.encode([begin, *objects, end])


def run(pb: Any, pb_grpc: Any, target: str, token: str) -> list[str]:
    outbox: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (message := outbox.get(timeout=20)) is not None:
            yield message

    seen: list[str] = []
    properties = {"namespaces": ["shop"], "permissions": {"READ": ["dev"], "WRITE": ["dev"]}}
    try:
        with grpc.insecure_channel(target) as channel:
            responses = pb_grpc.AgentStub(channel).Connect(
                requests(), metadata=[("authorization", f"Bearer {token}")], timeout=20
            )

            def next_of(kind: str) -> Any:
                for message in responses:
                    which = message.WhichOneof("message")
                    seen.append(which)
                    if which == kind:
                        return getattr(message, kind)
                raise AssertionError(f"the stream ended before a {kind}")

            account = pb.AccountInfo(
                name="prod",
                kube_host="10.9.9.9:6443",
                cert_fingerprint="cd" * 32,
                kube_version="v1.30.0",
                properties_json=json.dumps(properties),
            )
            hello = pb.Hello(
                protocol_version=pb.PROTOCOL_VERSION_CURRENT,
                agent_id="doc-client",
                instance_id="i-doc",
                agent_version="doc",
                accounts=[account],
            )
            outbox.put(pb.AgentMessage(hello=hello))
            welcome = next_of("welcome")
            roles = [(a.name, a.role) for a in welcome.accounts]
            assert roles == [("prod", pb.PRIMARY)], roles
            assert welcome.limits.max_message_size > 0, welcome.limits
            # A first listing with two ConfigMaps, then a relist that no longer has "old":
            # its SYNC_END deletes "old" on the server (§7.1). Seqs 1 and 2 (§8).
            first = listing(configmap("app", "41"), configmap("old", "40"), version="41")
            second = listing(configmap("app", "42"), version="42")
            for seq, data, count in ((1, first, 4), (2, second, 3)):
                batch = pb.EventBatch(seq=seq, records=data, count=count)
                outbox.put(pb.AgentMessage(event_batch=batch))
                ack = next_of("ack")
                assert ack.seq == seq, (ack, seq)
            beat = pb.Heartbeat(sent_at_ms=int(time.time() * 1000))
            outbox.put(pb.AgentMessage(heartbeat=beat))
            assert next_of("heartbeat").sent_at_ms > 0
            outbox.put(None)  # half-close: the server ends the call with OK
            seen.extend(message.WhichOneof("message") for message in responses)
            assert responses.code() == grpc.StatusCode.OK, responses.code()
    finally:
        outbox.put(None)
    return seen


def main(argv: list[str]) -> None:
    stubs, target, token = argv
    sys.path.insert(0, stubs)
    pb = importlib.import_module("kubesvc_pb2")
    pb_grpc = importlib.import_module("kubesvc_pb2_grpc")
    print(json.dumps({"seen": run(pb, pb_grpc, target, token)}))


if __name__ == "__main__":
    main(sys.argv[1:])
