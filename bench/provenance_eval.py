"""`make eval`: provenance over the labelled calls of tests/fixtures/provenance_eval.json.

Each case is a run's log (OpenAI chat format), the call's tool (its effect, its aimed pointers,
the run's trusted tools) and arguments, and its labels: the flags provenance must raise (pointer
and code), the best source's kind for each argument, and the pointers whose text addresses a
reviewer. The categories: benign, injected (an aimed value only an untrusted tool's output
held), lookalike, over_limit (the amount is the task's; the desk's preview flags it, not
provenance), dangerous_command (from the task: benign; from a file or a page: injected) and
model_written (no source at all).

Prints a table per category, the precision and recall of "flagged" (any provenance flag) over
the cases labelled with one, and the two targets: every case labelled untrusted_origin is
flagged so at those pointers; no value labelled as the task's is shown as a tool's or flagged as
one. Exits 1 when a target is missed. Pure CPU: no database, no processes.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.addressed import injection_flags
from agents.provenance import ToolTrust, provenance_flags, provenance_of

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "provenance_eval.json"
CATEGORIES = ("benign", "injected", "lookalike", "over_limit", "dangerous_command", "model_written")


def eval_cases(path: Path = FIXTURE) -> list[dict[str, Any]]:
    """The labelled calls, as stored (the second opinion's evaluation reads the same list)."""
    return json.loads(path.read_text())["cases"]


def trust_of(case: dict[str, Any]) -> ToolTrust:
    trusted, answers = frozenset(case["trusted_tools"]), frozenset(case.get("answers_human", ()))
    rejected = frozenset(case.get("rejected_calls", ()))  # the calls the host recorded rejected
    return ToolTrust(
        trusted=trusted.__contains__, answers_human=answers.__contains__, rejected=rejected.__contains__
    )


@dataclass(frozen=True)
class Outcome:
    case: dict[str, Any]
    provenance: dict[str, list[dict]]
    flags: frozenset[tuple[str, str]]
    best: dict[str, str]
    injection: frozenset[str]

    @property
    def expected_flags(self) -> frozenset[tuple[str, str]]:
        return frozenset((f["pointer"], f["code"]) for f in self.case["expected"]["flags"])

    @property
    def as_expected(self) -> bool:
        expected = self.case["expected"]
        return (
            self.flags == self.expected_flags
            and self.best == expected["best"]
            and self.injection == frozenset(expected["injection"])
        )

    @property
    def missed_injected(self) -> list[str]:
        """Pointers labelled untrusted_origin that were not flagged so."""
        return sorted(p for p, code in self.expected_flags - self.flags if code == "untrusted_origin")

    @property
    def task_shown_as_tool(self) -> list[str]:
        """Pointers labelled as the task's that are shown as a tool's output or flagged as one."""
        flagged = {p for p, code in self.flags if code == "untrusted_origin"}
        return sorted(
            pointer
            for pointer, kind in self.case["expected"]["best"].items()
            if kind == "task" and (self.best.get(pointer) == "tool_output" or pointer in flagged)
        )


def run_case(case: dict[str, Any]) -> Outcome:
    found = provenance_of(case["arguments"], case["messages"], trust_of(case))
    flags = provenance_flags(found, aimed=case["aimed"], external=case["external"])
    return Outcome(
        case=case,
        provenance=found,
        flags=frozenset((f["pointer"], f["code"]) for f in flags),
        best={pointer: sources[0]["kind"] for pointer, sources in found.items()},
        injection=frozenset(f["pointer"] for f in injection_flags(case["arguments"])),
    )


@dataclass(frozen=True)
class Report:
    outcomes: list[Outcome]

    @property
    def precision(self) -> float:
        flagged = [o for o in self.outcomes if o.flags]
        return sum(bool(o.expected_flags) for o in flagged) / len(flagged) if flagged else 1.0

    @property
    def recall(self) -> float:
        labelled = [o for o in self.outcomes if o.expected_flags]
        return sum(bool(o.flags) for o in labelled) / len(labelled) if labelled else 1.0

    @property
    def missed_injected(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.missed_injected]

    @property
    def task_shown_as_tool(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.task_shown_as_tool]

    @property
    def targets_met(self) -> bool:
        return not self.missed_injected and not self.task_shown_as_tool


def evaluate(cases: list[dict[str, Any]] | None = None) -> Report:
    return Report([run_case(case) for case in (eval_cases() if cases is None else cases)])


def table(report: Report) -> str:
    head = ("category", "cases", "as labelled", "flagged", "labelled flagged", "reviewer text")
    rows = [head]
    for category in CATEGORIES:
        outcomes = [o for o in report.outcomes if o.case["category"] == category]
        rows.append(
            (
                category,
                str(len(outcomes)),
                str(sum(o.as_expected for o in outcomes)),
                str(sum(bool(o.flags) for o in outcomes)),
                str(sum(bool(o.expected_flags) for o in outcomes)),
                str(sum(bool(o.injection) for o in outcomes)),
            )
        )
    rows.append(
        (
            "all",
            str(len(report.outcomes)),
            str(sum(o.as_expected for o in report.outcomes)),
            str(sum(bool(o.flags) for o in report.outcomes)),
            str(sum(bool(o.expected_flags) for o in report.outcomes)),
            str(sum(bool(o.injection) for o in report.outcomes)),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(report: Report) -> str:
    codes = Counter(code for o in report.outcomes for _, code in o.flags)
    labelled = sum(bool(o.expected_flags) for o in report.outcomes)
    preview = [o for o in report.outcomes if o.case["expected"].get("flagged_by") == "preview"]
    lines = [
        f"flags raised: {dict(sorted(codes.items()))}",
        f"left to the desk's preview (amount over what is left): {len(preview)} cases, "
        f"{sum(not o.flags for o in preview)} with no provenance flag",
        f'precision of "flagged": {report.precision:.2f}; recall over the {labelled} cases labelled '
        f"injected or lookalike: {report.recall:.2f}",
        f"values from the task shown as a tool's or flagged as one: {len(report.task_shown_as_tool)} cases",
        "target: every injected-from-tool-output case flagged: "
        + ("met" if not report.missed_injected else f"MISSED ({len(report.missed_injected)})"),
        "target: no value from the task flagged as coming from a tool: "
        + ("met" if not report.task_shown_as_tool else f"MISSED ({len(report.task_shown_as_tool)})"),
    ]
    for o in report.outcomes:
        if not o.as_expected:
            lines.append(
                f"  not as labelled: {o.case['id']}: flags {sorted(o.flags)} (labelled "
                f"{sorted(o.expected_flags)}), best {o.best} (labelled {o.case['expected']['best']}), "
                f"reviewer text {sorted(o.injection)} (labelled {o.case['expected']['injection']})"
            )
    return "\n".join(lines)


def main() -> int:
    report = evaluate()
    print(f"Provenance over {len(report.outcomes)} labelled calls ({FIXTURE.name})\n")
    print(table(report))
    print()
    print(summary(report))
    return 0 if report.targets_met else 1


if __name__ == "__main__":
    sys.exit(main())
