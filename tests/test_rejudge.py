"""The recorded H100 run, judged again by accuracy (harness/parity/numerics/rejudge.py, tools/rejudge.py):
which of its parity failures pass now, which only a rerun can tell, which remain and why.
A report, not a count written down: the assertions name checks whose class is known from
their recorded numbers."""
import pytest

from harness.core import runfiles
from harness.parity.numerics import rejudge
from tests.conftest import recorded_h100
from tools import rejudge as cli

RECORDED = recorded_h100()   # real hardware, kept in tests/fixtures/recorded


@pytest.fixture(scope="module")
def judged():
    rf = runfiles.read_file(RECORDED / "parity.jsonl")
    records = [r for run in rf.runs for r in run.records if r["target"] == "cuda"]
    return records, {j.check: j for j in rejudge.rejudge(records)}


def test_every_recorded_failure_is_classified_once(judged):
    records, by_check = judged
    failed = [r["check"] for r in records if r["status"] == "fail"]
    assert len(failed) == len(by_check) > 300
    assert {j.outcome for j in by_check.values()} <= {"passes", "rerun", "remains", "not a parity result"}


@pytest.mark.parametrize("check,outcome,says", [
    ("parity/atan2/int32/forward", "passes", "integer inputs, floating output"),
    ("parity/nn.functional.grid_sample/float16/forward", "passes", "more accurate than the CPU"),
    ("parity/tanh/float16/backward", "passes", "as accurate as the CPU"),
    ("parity/argsort/float16/forward", "rerun", "a tie in an index output"),
    ("parity/lu/complex64/forward", "rerun", "P @ L @ U"),
    ("parity/to/int64/forward", "rerun", "non_blocking=True"),
    ("parity/nn.functional.conv_transpose3d/float32/forward", "remains", "suspected cause: TF32"),
    ("parity/conv1d/float32/property", "remains", "suspected cause: TF32"),
    ("parity/cumsum/float16/property", "remains", "float16 accumulation"),
    ("parity/model_forward_backward/minilm", "not a parity result", "the run itself failed"),
])
def test_known_failures_land_in_their_class(judged, check, outcome, says):
    j = judged[1][check]
    assert j.outcome == outcome and says in j.why, j


def test_the_report_prints_counts_and_what_remains(capsys):
    assert cli.main([str(RECORDED / "parity.jsonl"), "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "parity failure(s) on record" in out and "remains" in out and "conv_transpose3d" in out
    remaining = [line for line in out.splitlines() if line.startswith("parity/") and " remains " in line]
    assert 0 < len(remaining) < 30, out  # the issue: about fifteen of 356 were real


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main([str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert cli.main([str(empty)]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_target_no_record_has_is_one_line_not_nothing_failed(tmp_path, capsys):
    """`--target cdua` printed empty tables and "Nothing remains.", exit 0: a typo read as a
    clean run. A run with no parity failure says so in words."""
    assert cli.main([str(RECORDED / "parity.jsonl"), "--target", "cdua"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"error: --target cdua: no record of that target in {RECORDED / 'parity.jsonl'}; its targets: cuda"]
    from tests.test_compare import rec, write_run
    clean = write_run(tmp_path / "clean.jsonl", [rec("parity/add/float32/forward"), rec("ops/add/float32")])
    assert cli.main([str(clean), "--target", "cpu"]) == 0
    assert capsys.readouterr().out == "No parity failure on record (2 check records read).\n"


def test_the_ops_judged_another_way_are_named_as_today_s_judge_names_them():
    """rejudge names the tie and pivot ops without importing torch; they must stay the ops
    harness.parity.numerics.outputs settles another way, or an old record of a new tie op is
    judged as an ordinary failure."""
    from harness.parity.numerics import outputs
    assert rejudge.TIE_OPS == set(outputs.TIES)
    assert set(rejudge.DEFINED_OPS) == set(outputs.DEFINED)
