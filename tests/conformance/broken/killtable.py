"""Run every mutant of the corpus and its twin N times; print the kill table.

Usage (from the repository's root; ``scripts/kill-table`` does this)::

    PYTHONPATH=tests/conformance .venv/bin/python -m broken.killtable [--runs N] [-k WORDS]
        [--json PATH]

Each run is one conformance run (the Python API, :func:`checkpointkit.conformance.run`)
of the mutant's killer test alone. A mutant is *killed* in a run when the killer
fails; its twin *passes* a run when the killer passes. The table gives, per mutant,
the clauses, the killer, kills/N, twin passes/N and the longest time the killer took
to fail. The exit status is 1 unless every mutant was killed in every run and every
twin passed every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from checkpointkit.conformance import Report, run

from .corpus import MUTANTS, Mutant, after_run

__all__ = ["Trial", "main", "trial"]


@dataclass
class Trial:
    """What N runs of one side (the mutant or its twin) gave.

    Attributes:
        mutant: the mutant's name.
        side: ``"broken"`` or ``"twin"``.
        runs: how many runs.
        failed: runs in which the killer failed.
        passed: runs in which the killer passed.
        seconds: the killer's duration in each run.
        reasons: the first line of the killer's reason in each run that did not pass.
    """

    mutant: str
    side: str
    runs: int
    failed: int = 0
    passed: int = 0
    seconds: list[float] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def _killer_results(report: Report, killer: str) -> list[str]:
    return [
        r.outcome for r in report.results if r.name == killer or r.name.startswith(killer + "[")
    ]


async def trial(mutant: Mutant, side: str, runs: int) -> Trial:
    """Run the killer of ``mutant`` against one side ``runs`` times.

    Args:
        mutant: the mutant.
        side: ``"broken"`` (the mutant) or ``"twin"``.
        runs: how many runs.
    """
    make = mutant.broken if side == "broken" else mutant.twin
    out = Trial(mutant.name, side, runs)
    for _ in range(runs):
        with make() as target:
            start = time.monotonic()
            report = await run(target, groups=[mutant.group], pattern=mutant.killer)
            took = time.monotonic() - start
        after_run()
        outcomes = _killer_results(report, mutant.killer)
        out.seconds.append(took)
        if not outcomes or report.errors:
            out.reasons.append("; ".join(report.errors) or f"{mutant.killer} did not run")
        elif "failed" in outcomes:
            out.failed += 1
            if side == "twin":
                out.reasons.append(_reason(report, mutant.killer))
        elif all(o == "passed" for o in outcomes):
            out.passed += 1
            if side == "broken":
                out.reasons.append("the killer passed")
        else:
            out.reasons.append(_reason(report, mutant.killer))
    return out


def _reason(report: Report, killer: str) -> str:
    for r in report.results:
        if (r.name == killer or r.name.startswith(killer + "[")) and r.outcome != "passed":
            return f"{r.outcome}: {r.reason.splitlines()[0][:160] if r.reason else ''}"
    return "no result"


def table(rows: Sequence[tuple[Mutant, Trial, Trial]]) -> str:
    """The kill table as text, one line per mutant."""
    head = ("mutant", "clauses", "killed by", "kills", "twin passes", "time to fail")
    lines = [head]
    for mutant, broken, twin in rows:
        fail_times = broken.seconds if broken.failed else []
        lines.append(
            (
                mutant.name,
                ", ".join(mutant.clauses),
                mutant.killer,
                f"{broken.failed}/{broken.runs}",
                f"{twin.passed}/{twin.runs}",
                f"{max(fail_times):.1f} s" if fail_times else "-",
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    text = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in lines
    ]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


async def _main(runs: int, words: str | None, json_path: str | None) -> int:
    chosen = [m for m in MUTANTS if not words or words in m.name]
    rows = []
    start = time.monotonic()
    for mutant in chosen:
        broken = await trial(mutant, "broken", runs)
        twin = await trial(mutant, "twin", runs)
        rows.append((mutant, broken, twin))
        print(
            f"{mutant.name}: killed {broken.failed}/{runs}, twin passed {twin.passed}/{runs}",
            file=sys.stderr,
            flush=True,
        )
    print(table(rows))
    clauses = sorted({c for m, b, _ in rows if b.failed == b.runs for c in m.clauses})
    killed = sum(b.failed == b.runs for _, b, _ in rows)
    clean = sum(t.passed == t.runs for _, _, t in rows)
    print(
        f"\n{len(rows)} mutants, {runs} runs each: {killed} killed in every run, "
        f"{clean} twins passed every run; {len(clauses)} clauses proven; "
        f"{time.monotonic() - start:.0f} s"
    )
    for mutant, broken, twin in rows:
        for trial_ in (broken, twin):
            for reason in dict.fromkeys(trial_.reasons):
                print(f"  {mutant.name} ({trial_.side}): {reason}")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(
                [
                    {
                        "mutant": m.name,
                        "clauses": list(m.clauses),
                        "killer": m.killer,
                        "broken": asdict(b),
                        "twin": asdict(t),
                    }
                    for m, b, t in rows
                ],
                f,
                indent=2,
            )
    return 0 if killed == len(rows) and clean == len(rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="kill-table", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per side (default 10)")
    parser.add_argument("-k", dest="words", help="only the mutants whose name contains WORDS")
    parser.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    return asyncio.run(_main(args.runs, args.words, args.json_path))


if __name__ == "__main__":
    sys.exit(main())
