"""``kubesvc sim``: starts, writes a usable kubeconfig, loads objects, churns, stops."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import yaml

import kubesim
from kubesvc.cli import main


def test_sim_runs_and_writes_a_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kc.yaml"
    argv = [
        "sim",
        "--port",
        "0",
        "--kubeconfig",
        str(path),
        "--objects",
        "20",
        "--churn",
        "40",
        "--for-seconds",
        "1",
    ]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "(20 pods)" in out.out
    assert "created" in out.err
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"].startswith("http://127.0.0.1:")
    assert config["users"][0]["user"]["token"]


def test_sim_refuses_cert_auth_without_tls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "--port", "0", "--auth", "cert", "--kubeconfig", str(tmp_path / "kc.yaml")]
    assert main(argv) == 1
    assert "--auth cert needs --tls" in capsys.readouterr().err


async def test_a_busy_port_is_a_clear_error() -> None:
    with trio.fail_after(10):
        sim = kubesim.Cluster()
        async with kubesim.open_server(sim) as first:
            with pytest.RaisesGroup(
                pytest.RaisesExc(
                    kubesim.KubesimError, match=f"cannot listen on 127.0.0.1:{first.port}"
                ),
                flatten_subgroups=True,
            ):
                async with kubesim.open_server(sim, port=first.port):
                    pass
