"""``kubesvc doctor``: check an agent's config against its clusters and its server, and say
what blocks syncing and how to fix it (docs/doctor.md).

Layout: a sans-I/O core (``_findings``: Finding, Verdict, Report and their rendering;
``_judge``, ``_kube_judge``, ``_kinds``, ``_link_judge``: facts and errors turned into
findings with hints) under thin trio runners (``_kube``: one account through the agent's own
kubeconfig loader, credential sources and Kubernetes client; ``_link``: the server through
the agent's TLS settings and token source and wire's bridge; ``_run``: all of it).
"""

from ._findings import SERVER, Finding, Report, Verdict, render_json, render_table
from ._run import DEFAULT_SECONDS, run_doctor

__all__ = [
    "DEFAULT_SECONDS",
    "SERVER",
    "Finding",
    "Report",
    "Verdict",
    "render_json",
    "render_table",
    "run_doctor",
]
