"""Kubernetes manifests for the agent and the server, one folder per deployment mode.

The YAML files ship as package data so that tests and ``kubesvc`` can find them installed.
"""

from pathlib import Path

ROOT = Path(__file__).parent

__all__ = ["ROOT"]
