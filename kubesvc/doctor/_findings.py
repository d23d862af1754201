"""What the doctor found, and how it is shown: one Finding per check, a verdict, a table, JSON.

Sans-I/O: the runners (kubesvc/doctor/_kube.py, _link.py) make Findings; this module only
orders, counts and renders them. The exit status follows the worst verdict: any FAIL (something
that keeps the agent from syncing an account or from reaching the server) is 1; WARN alone
(works today, but will not for long or not fully) is 0.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

__all__ = ["SERVER", "Finding", "Report", "Verdict", "render_json", "render_table"]

#: The account column of the checks about the link to the server.
SERVER = "(server)"


class Verdict(enum.StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


_RANK = {Verdict.OK: 0, Verdict.WARN: 1, Verdict.FAIL: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's outcome: ``hint`` says what to change to fix it ("" when there is nothing
    to fix)."""

    account: str
    check: str
    verdict: Verdict
    detail: str
    hint: str = ""


@dataclass(frozen=True, slots=True)
class Report:
    """Every finding, in the order the checks ran (the config's accounts, then the server)."""

    findings: tuple[Finding, ...]

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> Report:
        return cls(tuple(findings))

    @property
    def verdict(self) -> Verdict:
        worst = max((_RANK[f.verdict] for f in self.findings), default=0)
        return next(v for v, rank in _RANK.items() if rank == worst)

    @property
    def exit_code(self) -> int:
        """1 when something blocks syncing (a FAIL), else 0."""
        return 1 if self.verdict is Verdict.FAIL else 0

    def count(self, verdict: Verdict) -> int:
        return sum(1 for f in self.findings if f.verdict is verdict)

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(v)} {v}" for v in (Verdict.FAIL, Verdict.WARN, Verdict.OK))
        if self.verdict is Verdict.FAIL:
            return f"{counts}: something blocks syncing (see the FAIL lines)"
        if self.verdict is Verdict.WARN:
            return f"{counts}: the agent can sync; the WARN lines need attention"
        return f"{counts}: everything checked is fine"


_HEADER = ("VERDICT", "ACCOUNT", "CHECK", "DETAIL")


def render_table(report: Report, *, color: bool = False) -> str:
    """One line per check (verdict, account, check, detail, then ``fix: hint``), aligned, and
    a summary line. Detail and hint are never cut: they are what an operator acts on."""
    rows: Sequence[tuple[str, str, str, str]] = [
        (f.verdict.value, f.account, f.check, _line(f)) for f in report.findings
    ]
    widths = [max([len(_HEADER[i]), *(len(row[i]) for row in rows)]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(_HEADER[:3], widths, strict=True)) + "  DETAIL"]
    for finding, row in zip(report.findings, rows, strict=True):
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        if color:
            cells[0] = _COLORS[finding.verdict] + cells[0] + "\x1b[0m"
        lines.append("  ".join(cells) + "  " + row[3])
    lines.append("")
    lines.append(f"doctor: {report.summary()}")
    return "\n".join(lines) + "\n"


_COLORS = {Verdict.OK: "\x1b[32m", Verdict.WARN: "\x1b[33m", Verdict.FAIL: "\x1b[31;1m"}


def _line(finding: Finding) -> str:
    text = " ".join(finding.detail.split())  # one line per check, whatever the message held
    if finding.hint:
        text += "  -> fix: " + " ".join(finding.hint.split())
    return text


def render_json(report: Report) -> str:
    """``{"verdict", "exitCode", "summary", "findings": [{account, check, verdict, detail,
    hint}]}`` for machines (stable keys; the findings in the table's order)."""
    document = {
        "verdict": report.verdict.value,
        "exitCode": report.exit_code,
        "summary": {v.value: report.count(v) for v in Verdict},
        "findings": [{**asdict(f), "verdict": f.verdict.value} for f in report.findings],
    }
    return json.dumps(document, indent=2) + "\n"
