"""benchmarks/optim_budget_stop.py: the simulation behind the rule that a time claim buys only
the rounds its budget left pays for (harness.optim.ratios.rounds_to_buy).

The benchmark prints figures and asserts none; this runs it small and reads its totals, so a
rule that overspent its budget again, or a benchmark that no longer runs (it imports the
durations of benchmarks/optim_zone_stop.py), is seen here."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "optim_budget_stop.py"


def _totals(*args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "3", "--noise", "0.05", *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    totals = {}
    for line in out.stdout.split("\ntotal\n", 1)[1].splitlines()[1:]:
        name, _, value = line.rpartition(" ")
        totals[name.strip()] = float(value)
    return totals


def test_the_budget_rule_never_overspends_and_never_turns_a_verdict_round():
    """On the H100 pair's figures the doubling overspends the budget on the claims near the
    zone; the rule spends less in all and turns no verdict between holds and does not hold."""
    totals = _totals()
    assert totals["claims"] == 75
    assert totals["budget overspent, doubling"] > 0
    assert totals["seconds, budget rule"] < totals["seconds, doubling"]
    assert totals["of which holds against does-not-hold"] == 0


def test_a_budget_no_claim_reaches_changes_nothing():
    """Control: with a budget too large to reach before max_rounds, the rule and the doubling
    buy the same rounds, so their verdicts and seconds are the same."""
    totals = _totals("--side-s", "0.01", "--budget-s", "100000")
    assert totals["verdicts differ"] == 0 and totals["budget overspent, doubling"] == 0
    assert totals["seconds, budget rule"] == totals["seconds, doubling"]


def test_bad_input_is_one_clear_line_and_exit_2():
    """A count or a time that cannot be (no seeds, a negative step, a word) is refused before
    anything runs: argparse's line naming the option, exit status 2, no traceback."""
    for args in (["--seeds", "0"], ["--side-s", "-1"], ["--rounds", "x"], ["--noise", "0"]):
        out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
        assert out.returncode == 2 and out.stdout == "", args
        assert "error: argument " + args[0] in out.stderr and "Traceback" not in out.stderr, out.stderr
