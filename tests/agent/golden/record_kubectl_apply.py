"""Record what real ``kubectl apply`` leaves, for the golden client-side apply tests.

Run from the repository root (it needs kubectl, 1.32 by default, on the PATH)::

    .venv/bin/python -m tests.agent.golden.record_kubectl_apply [--kubectl PATH] [CASE...]

For each case of ``kubectl_cases.py`` it starts a fresh kubesim in this process (HTTPS with a
token, announcing Kubernetes 1.32 so a version-dispatching kubectl runs 1.32), writes a
kubeconfig, runs the case's steps with kubectl, and writes
``kubectl_apply/<case>.json``: the steps with every write request kubectl sent (method,
path, content type and body, read from kubesim's write log), and the target object at the
end with its volatile metadata stripped. ``tests/agent/test_apply_golden.py`` replays those
files with the agent's apply and no kubectl; commit them.

kubectl must compute its patches from kubesim's OpenAPI: a warning that it fell back to
another schema fails the recording.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim

from . import RESULTS, strip_volatile, write_record
from .kubectl_cases import CASES, Apply, Case, Kubectl

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class Recorder:
    def __init__(self, kubectl: str, work: Path) -> None:
        self.kubectl = kubectl
        self.work = work

    async def run_kubectl(self, kubeconfig: Path, args: list[str]) -> str:
        command = [self.kubectl, *args, "--cache-dir", str(self.work / "cache")]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        done = await trio.run_process(command, env=env, capture_stdout=True, capture_stderr=True)
        stderr = done.stderr.decode()
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{stderr}")
        if "warning: error calculating patch" in stderr:
            raise SystemExit(f"kubectl did not use kubesim's OpenAPI:\n{stderr}")
        return done.stdout.decode()

    def manifest_file(self, manifests: list[dict[str, Any]]) -> Path:
        # JSON, not YAML: kubectl reads YAML 1.1, where a key like ``y`` is a boolean.
        path = self.work / "manifest.json"
        document = (
            manifests[0]
            if len(manifests) == 1
            else {
                "apiVersion": "v1",
                "kind": "List",
                "items": manifests,
            }
        )
        path.write_text(json.dumps(document))
        return path

    async def record(self, case: Case) -> dict[str, Any]:
        sim = kubesim.Cluster(kubesim.SimConfig(version=dict(VERSION)))
        async with kubesim.open_server(sim, tls=True) as server:
            kubeconfig = server.kubeconfig(self.work / "kubeconfig")
            steps: list[dict[str, Any]] = []
            for step in case.steps:
                server.writes.clear()
                if isinstance(step, Apply):
                    path = self.manifest_file(list(step.manifests))
                    await self.run_kubectl(kubeconfig, ["apply", "-f", str(path)])
                    record: dict[str, Any] = {"apply": list(step.manifests)}
                else:
                    assert isinstance(step, Kubectl)
                    args = list(step.args)
                    if step.manifest is not None:
                        args[args.index("-")] = str(self.manifest_file([step.manifest]))
                    await self.run_kubectl(kubeconfig, args)
                    record = {"kubectl": list(step.args)}
                writes = server.writes.recent()
                record["writes"] = [write_record(w) for w in writes]
                steps.append(record)
            agents = {w.user_agent for w in server.writes.recent()} or {""}
            assert server.ca_pem is not None
            verify = ssl.create_default_context(cadata=server.ca_pem.decode())
            headers = {"authorization": f"Bearer {server.users['admin'].token}"}
            async with httpx.AsyncClient(verify=verify, headers=headers) as http:
                answer = await http.get(server.url + case.target)
                answer.raise_for_status()
        return {
            "case": case.name,
            "about": case.about,
            "recorded_with": sorted(agents)[0],
            "steps": steps,
            "target": case.target,
            "result": strip_volatile(answer.json()),
        }


async def main(kubectl: str, names: list[str]) -> None:
    chosen = [c for c in CASES if not names or c.name in names]
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        raise SystemExit(f"unknown cases: {', '.join(sorted(unknown))}")
    RESULTS.mkdir(exist_ok=True)
    for case in chosen:
        with tempfile.TemporaryDirectory() as work:
            recorded = await Recorder(kubectl, Path(work)).record(case)
        target = RESULTS / f"{case.name}.json"
        target.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"{case.name}: {recorded['recorded_with']}", file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubectl", default="kubectl", help="the kubectl to record")
    parser.add_argument("cases", nargs="*", help="only these cases (default: all)")
    options = parser.parse_args()
    trio.run(main, options.kubectl, options.cases)
