"""The plugin's terminal summary: this run's results per suite and target, where they
were written, and the comparison with the baseline (``--baseline``)."""
from __future__ import annotations

import os

from harness.core import options
from harness.report import matrix


def write_summary(terminalreporter, state) -> None:
    """The mps-compat sections at the end of pytest's output, for the controller's
    ``SessionState`` (harness/pytest_plugin.py) of a run that recorded checks."""
    from tabulate import tabulate
    tr = terminalreporter
    tr.section("mps-compat: this run")
    rows = [(suite, target, matrix.format_counts(c)) for suite, target, c in matrix.suite_counts(state.records)]
    tr.write_line(tabulate(rows, headers=("suite", "target", "results"), tablefmt="simple"))
    tr.write_line("legend: " + "  ".join(f"{sym} {key}" for key, sym, _ in matrix.LEGEND))
    from harness.env import facts
    for name, info in options.target_table(state.targets, facts.current()).items():
        if info["selected"] and not info["available"]:
            tr.write_line(f"{name}: skipped: {info['reason']}")
    rel = os.path.relpath(state.writer.path) if state.writer else "?"
    tr.write_line(f"run file: {rel}   full matrix: python -m tools.report")
    if state.saved:
        tr.write_line(f"baseline kept: {os.path.relpath(state.saved)} (compare later runs with --baseline)")
    for problem in state.write_errors:
        tr.write_line(f"ERROR: {problem}", red=True)
    if state.comparison is not None:
        from harness.report import compare
        cmp = state.comparison
        tr.section("mps-compat: against the baseline", red=bool(cmp.regressions), green=not cmp.regressions)
        tr.write_line(compare.render(cmp, "table").rstrip())
        if cmp.regressions:
            tr.write_line(f"FAILED: {len(cmp.regressions)} regression(s) against {cmp.baseline.label}", red=True)
