"""The regression check (harness/report/compare.py, tools/compare.py): planted changes of each kind are
found exactly, identical runs give none, and bad input is one line and exit 2."""
import json
import subprocess
import sys
from collections import Counter

import pytest

from harness.core import runfiles
from harness.core.records import SCHEMA
from harness.report import compare
from tests.conftest import ROOT
from tools import compare as cli


def rec(check: str, status: str = "pass", category: str = "n/a", target: str = "cpu", reason: str = "",
        **metrics) -> dict:
    suite, subject, *variant = check.split("/")
    return {"kind": "check", "run": "?", "check": check, "suite": suite, "subject": subject,
            "variant": "/".join(variant), "target": target, "status": status, "category": category,
            "metrics": metrics, "reason": reason, "duration_s": 0.1, "nodeid": check}


def write_run(path, records, env_id="host-a-torch2.8", torch_version="2.8.0", run_id="r1", end=True, judges=None):
    """A run file of ``records``; its header says today's judges (records.JUDGES), or ``judges``
    where given: ``{}`` is a header written before headers named them (records.judge_of)."""
    w = runfiles.Writer(path)
    facts = {"host": "host-a", "packages": {"torch": torch_version, "transformers": "5.0.0"}}
    header = runfiles.header(run_id, env_id, facts)
    if judges is not None:
        header = {k: v for k, v in header.items() if k != "judges"} | ({"judges": judges} if judges else {})
    w.write(header)
    for r in records:
        w.write({**r, "run": run_id})
    if end:
        w.write({"kind": "end", "run": run_id, "finished": runfiles.now_iso(), "exitstatus": 0, "counts": {}})
    w.close()
    return path


HOLDS = dict(category="holds", mem_ratio=0.48, ci_low=0.48, ci_high=0.48, bound=0.62)
BASELINE = [
    rec("ops/softmax/float32/forward", category="native"),
    rec("ops/cumsum/int64/forward", category="native"),
    rec("ops/nonzero/float32/forward", category="native"),
    rec("ops/erfinv/float16/forward", category="cpu-fallback", fallback_ops=["aten::erfinv"]),
    rec("ops/model_step_runs_natively/bert", category="native"),
    rec("ops/sort/float32/forward", category="native"),
    rec("parity/gelu/float32/forward", category="parity", max_abs_err=1e-7, margin=0.05),
    rec("parity/exp/float16/forward", category="parity", max_abs_err=1e-3, margin=0.2),
    rec("parity/tiny/float32/forward", category="parity", max_abs_err=1e-12, margin=1e-5),
    rec("parity/det/float32/backward", "fail", category="parity", reason="max_abs_err 0.148"),
    rec("parity/acos/float16/backward", "xfail", category="parity", reason="precision limit"),
    rec("parity/logit/float16/forward", category="parity", max_abs_err=1e-4, margin=0.3, inputs="aa bb cc"),
    rec("optim/gradient-checkpointing/memory", **HOLDS),
    rec("optim/adafactor/memory", **HOLDS),
    rec("optim/torch-compile/time", category="holds", time_ratio=0.9, ci_low=0.85, ci_high=0.93),
    rec("optim/freeze-backbone/time", "xfail", category="does-not-hold", time_ratio=0.9, ci_low=0.8, ci_high=0.98),
    rec("env/macos-version", target="mps"),
    rec("env/mps-device", target="mps"),   # still runs: mps is not lost (target-lost), one check is skipped
    rec("env/threads"),
    rec("ops/gone/float32/forward", category="native"),
]

# one planted change of each kind: check -> (record in the candidate, expected (kind, rule))
PLANTED = {
    "ops/softmax/float32/forward": (dict(status="fail", reason="AssertionError"), ("regression", "status")),
    "ops/cumsum/int64/forward": (dict(status="crash", category="n/a"), ("regression", "status")),
    "ops/sort/float32/forward": (dict(status="timeout", category="n/a"), ("regression", "status")),
    "ops/nonzero/float32/forward": (dict(category="cpu-fallback", metrics={"fallback_ops": ["aten::nonzero"]}),
                                    ("regression", "fallback")),
    "ops/model_step_runs_natively/bert": (dict(category="unsupported"), ("regression", "fallback")),
    "ops/erfinv/float16/forward": (dict(category="native", metrics={}), ("improvement", "fallback")),
    "parity/gelu/float32/forward": (dict(metrics={"max_abs_err": 5e-7, "margin": 0.25}),
                                    ("warning", "parity-growth")),
    "parity/tiny/float32/forward": (dict(metrics={"max_abs_err": 1e-10, "margin": 1e-3}), None),  # under floor
    "parity/exp/float16/forward": (dict(metrics={"max_abs_err": 1.5e-3, "margin": 0.3}), None),   # 1.5x: fine
    "parity/det/float32/backward": (dict(status="pass", reason=""), ("improvement", "status")),
    "parity/acos/float16/backward": (dict(status="pass", reason=""), ("improvement", "limitation")),
    "parity/logit/float16/forward": (dict(status="xfail", reason="precision limit",
                                          metrics={"inputs": "aa bb cc dd", "worst_sample": 1}),
                                     ("regression", "limitation")),
    "optim/gradient-checkpointing/memory": (dict(status="xfail", category="does-not-hold",
                                                 metrics={**HOLDS, "mem_ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0}),
                                            ("regression", "claim")),
    "optim/adafactor/memory": (dict(metrics={**HOLDS, "mem_ratio": 0.61, "ci_low": 0.61, "ci_high": 0.61}),
                               ("regression", "claim-ratio")),
    "optim/torch-compile/time": (dict(status="xfail", category="inconclusive"), ("warning", "claim")),
    "optim/freeze-backbone/time": (dict(status="pass", category="holds"), ("improvement", "claim")),
    "env/macos-version": (dict(status="skip", reason="MPS unavailable"), ("warning", "coverage")),
}


def candidate_records():
    out = []
    for r in BASELINE:
        if r["check"] == "ops/gone/float32/forward":
            continue
        change = PLANTED.get(r["check"])
        if change:
            fields = dict(change[0])
            metrics = fields.pop("metrics", None)
            r = {**r, **fields, **({"metrics": metrics} if metrics is not None else {})}
        out.append(r)
    return out + [rec("ops/new_op/float32/forward", category="native"), rec("ops/zz_new/float32/forward", "crash")]


@pytest.fixture
def files(tmp_path):
    base = write_run(tmp_path / "base.jsonl", BASELINE)
    cand = write_run(tmp_path / "cand.jsonl", candidate_records(), env_id="host-a-torch2.10", torch_version="2.10.0")
    return base, cand


def test_each_planted_change_is_found_exactly(files):
    result = compare.compare(compare.load_side([str(files[0])]), compare.load_side([str(files[1])]))
    found = {(c.check, c.kind, c.rule) for c in result.changes if c.kind not in ("appeared", "disappeared")}
    expected = {(check, *want) for check, (_, want) in PLANTED.items() if want}
    assert found == expected
    assert sorted((c.kind, c.check) for c in result.changes if c.kind in ("appeared", "disappeared")) == [
        ("appeared", "ops/new_op/float32/forward"), ("appeared", "ops/zz_new/float32/forward"),
        ("disappeared", "ops/gone/float32/forward")]
    assert result.unchanged == 4          # env/threads, env/mps-device, exp grown 1.5x, tiny grown under the floor
    assert result.version_changes() == [("torch", "2.8.0", "2.10.0")]


def test_regressions_exit_1_and_identical_runs_exit_0(files, tmp_path, capsys):
    assert cli.main([str(files[0]), str(files[1])]) == 1
    out = capsys.readouterr().out
    # a result that changed on the same sample inputs says so first
    assert "(sample 1 has the same inputs in both versions: the kernel's result changed) precision limit" in out
    assert "Regressions (8)" in out and "torch 2.8.0 -> 2.10.0" in out
    appeared = out[out.index("Checks only in the candidate"):].splitlines()
    assert appeared[5].startswith("ops/zz_new/float32/forward") and "crash" in appeared[5]  # failures first
    same = write_run(tmp_path / "same.jsonl", BASELINE, run_id="r2")
    assert cli.main([str(files[0]), str(same)]) == 0
    out = capsys.readouterr().out
    assert "0 regression(s), 0 warning(s), 0 improvement(s), 0 appeared, 0 disappeared" in out


def test_json_and_markdown_say_the_same(files, tmp_path, capsys):
    out_file = tmp_path / "out" / "cmp.json"
    assert cli.main([str(files[0]), str(files[1]), "--format", "json", "--out", str(out_file)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(out_file.read_text())
    assert doc["counts"] == {"regression": 8, "warning": 3, "improvement": 4, "appeared": 2, "disappeared": 1,
                             "unchanged": 4}
    assert doc["compare_schema"] == compare.COMPARE_SCHEMA
    assert cli.main([str(files[0]), str(files[1]), "--format", "md"]) == 1
    md = capsys.readouterr().out
    assert "## Regressions (8)" in md and "| ops/softmax/float32/forward" in md
    # a page is read from the top: its verdict before the first table (a terminal's is its last line)
    verdict = "**8 regression(s), 3 warning(s), 4 improvement(s), 2 appeared, 1 disappeared, 4 unchanged**"
    assert md.index(verdict) < md.index("## Regressions") and md.count("regression(s)") == 1


@pytest.mark.parametrize("before, after, says", [
    (dict(inputs="aa bb"), dict(status="xfail", inputs="aa bx", worst_sample=1),
     "sample 1 has other inputs in the other version: OpInfo's samples changed"),
    (dict(inputs="aa bb"), dict(status="xfail", inputs="aa bb cc", worst_sample=2), "sample 2 exists in one version only"),
    (dict(status="xfail", inputs="aa bb", worst_sample=0), dict(inputs="aa bb"),
     "sample 0 has the same inputs in both versions"),
    (dict(inputs="aa bb", margin=0.1), dict(inputs="aa bb", margin=0.5), "the same 2 sample inputs in both versions"),
    (dict(inputs="aa bb", margin=0.1), dict(inputs="aa cc dd", margin=0.5),
     "the sample inputs differ (2 -> 3 samples, 1 identical)"),
    (dict(margin=0.1), dict(margin=0.5), None),       # records without digests: nothing said
])
def test_a_changed_parity_result_says_whether_its_inputs_changed(before, after, says):
    def make(fields):
        fields = dict(fields)
        status = fields.pop("status", "pass")
        return rec("parity/op/float16/forward", status, category="parity", reason="r", **fields)
    found = compare.compare_records(make(before), make(after))
    assert len(found) == 1
    detail = found[0][2]
    assert (says in detail) if says else ("sample" not in detail), detail


def test_a_pipe_in_a_reason_does_not_break_the_markdown_table(tmp_path, capsys):
    base = write_run(tmp_path / "b.jsonl", [rec("ops/a/float32/forward")])
    cand = write_run(tmp_path / "c.jsonl", [rec("ops/a/float32/forward", "fail", reason="x | y\nz")])
    assert cli.main([str(base), str(cand), "--format", "md"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| ops/a"))
    assert "x \\| y z" in row and row.count(" | ") == 5


def test_the_growth_factor_is_an_option(files):
    base, cand = (compare.load_side([str(f)]) for f in files)
    loose = compare.compare(base, cand, factor=10)
    assert not [c for c in loose.changes if c.rule == "parity-growth"]
    strict = compare.compare(base, cand, factor=1.2)
    assert {c.check for c in strict.changes if c.rule == "parity-growth"} == {
        "parity/gelu/float32/forward", "parity/exp/float16/forward"}
    with pytest.raises(compare.CompareError):
        compare.compare(base, cand, factor=0.5)


def test_a_directory_side_and_its_newest_record(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    write_run(folder / "one.jsonl", [rec("ops/a/float32/forward", "fail"), rec("ops/b/float32/forward")], run_id="r1")
    second = [rec("ops/a/float32/forward")]
    w = runfiles.Writer(folder / "one.jsonl")   # a later run of the same environment, same file
    w.write({**runfiles.header("r2", "host-a-torch2.8", {"host": "host-a", "packages": {
        "torch": "2.8.0", "transformers": "5.0.0"}}), "started": "2999-01-01T00:00:00+00:00"})
    w.write({**second[0], "run": "r2"})
    w.close()
    side = compare.load_side([str(folder)])
    assert side.records[("ops/a/float32/forward", "cpu")]["status"] == "pass"
    # the second run never wrote its end line, but the whole first run's records stand where it
    # stopped: nothing is missing (harness.report.selection; a cut-off run alone is not complete)
    assert side.complete
    assert not compare.load_side([str(folder)], latest=True).complete   # the cut-off run alone
    assert ("ops/b/float32/forward", "cpu") in side.records          # partial runs add up
    latest = compare.load_side([str(folder)], latest=True)
    assert list(latest.records) == [("ops/a/float32/forward", "cpu")]  # --latest: the newest run alone


@pytest.mark.parametrize("base_env,cand_env,noted", [
    ({}, {"PYTORCH_MPS_FAST_MATH": "1"},
     "the baseline ran with neither switch, the candidate with PYTORCH_MPS_FAST_MATH=1"),
    ({"PYTORCH_MPS_PREFER_METAL": "0"}, {}, "the baseline ran with PYTORCH_MPS_PREFER_METAL=0, the candidate with "
                                            "neither switch"),
    ({"PYTORCH_MPS_FAST_MATH": "1"}, {"PYTORCH_MPS_FAST_MATH": "1"}, None),
    ({"PYTORCH_MPS_FAST_MATH": "0"}, {}, None),      # 0 is off: the same kernels
], ids=["fast-math-on", "metal-matmul-off-is-on", "alike", "zero-is-off"])
def test_mps_checks_compared_across_different_kernel_switches_are_said_to_be(tmp_path, base_env, cand_env, noted):
    """PYTORCH_MPS_FAST_MATH and PYTORCH_MPS_PREFER_METAL change the kernels MPS runs: a
    comparison of mps checks across sides that had different switches says so in a note, with
    the switch to set alike; a cpu-only comparison, or sides alike, say nothing."""
    def side(name, env, target):
        facts = {"host": "mac", "packages": {"torch": "2.15.0"}, "env": env}
        w = runfiles.Writer(tmp_path / f"{name}-{target}.jsonl")
        w.write(runfiles.header(name, f"mac-{name}", facts))
        w.write({**rec("parity/gelu/float32/forward", category="parity", target=target), "run": name})
        w.write({"kind": "end", "run": name, "finished": runfiles.now_iso(), "exitstatus": 0, "counts": {}})
        w.close()
        return compare.load_side([str(tmp_path / f"{name}-{target}.jsonl")])

    for target in ("mps", "cpu"):
        notes = compare.compare(side("base", base_env, target), side("cand", cand_env, target)).notes
        said = [n for n in notes if "MPS kernel switches" in n]
        if noted is None or target == "cpu":
            assert said == [], (target, notes)
        else:
            assert len(said) == 1 and noted in said[0] and said[0].startswith("1 mps check(s) compared"), said
            assert said[0].endswith("run both sides with the same PYTORCH_MPS_FAST_MATH and PYTORCH_MPS_PREFER_METAL")


def test_a_claim_measured_at_two_workloads_is_two_results_never_one_overwriting_the_other(tmp_path):
    small = rec("optim/tf32/time", category="does-not-hold", workload="small", time_ratio=0.99, ci_low=0.97,
                ci_high=1.01, bound=0.9)
    large = rec("optim/tf32/time", category="holds", workload="large", time_ratio=0.40, ci_low=0.39,
                ci_high=0.41, bound=0.9)
    both = compare.load_side([str(write_run(tmp_path / "both.jsonl", [small, large]))])
    assert both.records[("optim/tf32/time", "cpu [small workload]")]["metrics"]["time_ratio"] == 0.99
    assert both.records[("optim/tf32/time", "cpu [large workload]")]["metrics"]["time_ratio"] == 0.40
    # a small baseline against a large candidate: not a change of one result, two different results
    base = compare.load_side([str(write_run(tmp_path / "small.jsonl", [small]))])
    cand = compare.load_side([str(write_run(tmp_path / "large.jsonl", [large]))])
    result = compare.compare(base, cand)
    assert [c for c in result.changes if c.kind in ("regression", "improvement", "warning")] == []
    assert {(c.check, c.target) for c in result.changes if c.kind == "disappeared"} == {
        ("optim/tf32/time", "cpu [small workload]")}
    assert {(c.check, c.target) for c in result.changes if c.kind == "appeared"} == {
        ("optim/tf32/time", "cpu [large workload]")}


def test_a_ratio_without_an_interval_and_bound_is_not_judged_as_a_claim():
    # seed 003's path: a table of medians, not a measured claim
    a = rec("optim/seed_003_path_never_raises_peak_memory", time_ratio=1.66, mem_ratio=0.12)
    b = rec("optim/seed_003_path_never_raises_peak_memory", time_ratio=2.14, mem_ratio=0.12)
    assert compare.compare_records(a, b) == []


# --------------------------------------------------------------------------- bad input

def _bad_inputs(tmp_path):
    good = write_run(tmp_path / "good.jsonl", BASELINE)
    text = good.read_text()
    cases = {
        "missing": (str(tmp_path / "nope.jsonl"), "no such file"),
        "empty": (tmp_path / "empty.jsonl", "empty run file"),
        "malformed": (tmp_path / "bad.jsonl", "not valid JSON"),
        "truncated": (tmp_path / "cut.jsonl", "truncated last line"),
        "wrong schema": (tmp_path / "schema.jsonl", "schema version 99"),
        "not a run file": (tmp_path / "other.jsonl", "not a run-file line"),
        "no checks": (tmp_path / "nochecks.jsonl", "no check records"),
        "two environments": (tmp_path / "mixed", "runs of 2 environments"),
        "empty directory": (tmp_path / "nothing", "no run files"),
    }
    cases["empty"][0].write_text("")
    cases["malformed"][0].write_text(text.replace('"status": "pass"', '"status": pass', 1))
    cases["truncated"][0].write_text(text[: len(text) - 40])
    cases["wrong schema"][0].write_text(text.replace(f'"schema": {SCHEMA}', '"schema": 99', 1))
    cases["not a run file"][0].write_text('["a", "list"]\n')
    write_run(cases["no checks"][0], [])
    cases["two environments"][0].mkdir()
    write_run(cases["two environments"][0] / "a.jsonl", BASELINE)
    write_run(cases["two environments"][0] / "b.jsonl", BASELINE, env_id="host-b", run_id="r9")
    cases["empty directory"][0].mkdir()
    return good, cases


def test_bad_input_is_one_line_and_exit_2_on_either_side(tmp_path, capsys):
    good, cases = _bad_inputs(tmp_path)
    for name, (path, says) in cases.items():
        for args in ([str(path), str(good)], [str(good), str(path)]):
            assert cli.main(args) == 2, name
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("error: ") and says in err, (name, err)


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    good, cases = _bad_inputs(tmp_path)
    for name in ("truncated", "wrong schema"):
        res = subprocess.run([sys.executable, "-m", "tools.compare", str(good), str(cases[name][0])], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    res = subprocess.run([sys.executable, "-m", "tools.compare", str(good)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "candidate" in res.stderr


def test_an_unwritable_out_file_is_exit_2_and_the_comparison_still_printed(files, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main([str(files[0]), str(files[1]), "--out", str(blocker / "sub" / "cmp.txt")]) == 2
    captured = capsys.readouterr()
    assert "Regressions" in captured.out and captured.err.startswith("error: cannot write")


# --------------------------------------------------------------------------- robust input and output (issue 12)

def test_a_lone_surrogate_is_read_as_a_replacement_character_not_a_false_alarm(tmp_path):
    from tests.test_report import _run_module
    base = write_run(tmp_path / "b.jsonl", [rec("ops/a/float32/forward")])
    cand = write_run(tmp_path / "c.jsonl", [rec("ops/a/float32/forward"),
                                            rec("ops/nSURROGATE/float32/forward", "xfail", reason="limitSURROGATE")],
                     env_id="host-a-torch2.10", torch_version="2.10.0")
    text = cand.read_text().replace("SURROGATE", "\\ud800").replace('"host": "host-a"', '"host": "host-a\\udfff"')
    cand.write_text(text)                                   # valid JSON, but no character: no UTF-8 text holds it
    side = compare.load_side([str(cand)])
    assert side.records[("ops/n\ufffd/float32/forward", "cpu")]["reason"] == "limit\ufffd"
    assert side.header["facts"]["host"] == "host-a\ufffd"
    for fmt in ("table", "md", "json"):
        res = _run_module("tools.compare", str(base), str(cand), "--format", fmt)
        assert (res.returncode, res.stderr) == (0, ""), fmt   # nothing regressed: 0, not a crash read as 1
        assert "ops/n\ufffd/float32/forward" in res.stdout and "limit\ufffd" in res.stdout


def test_an_unexpected_error_is_exit_2_never_1(files, capsys, monkeypatch):
    def broken(*args):
        raise KeyError("surprise")
    monkeypatch.setattr(compare, "render", broken)
    monkeypatch.delenv("MPS_COMPAT_TRACEBACK", raising=False)
    assert cli.main([str(files[0]), str(files[1])]) == 2      # the files have regressions: 1 would be a verdict
    err = capsys.readouterr().err
    assert err == "error: internal error: KeyError: 'surprise' (MPS_COMPAT_TRACEBACK=1 shows the traceback)\n"
    monkeypatch.setenv("MPS_COMPAT_TRACEBACK", "1")
    assert cli.main([str(files[0]), str(files[1])]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_markdown_keeps_hostile_text_as_text(tmp_path, capsys):
    import html
    import re
    from tests.test_report import markdown_html, markdown_tables
    hostile = "<script>alert(1)</script> <img src=x onerror=alert(2)> a\\|b `c` & __init__"
    base = write_run(tmp_path / "b.jsonl", [rec("ops/<b>x</b>/float32/forward")])
    cand = write_run(tmp_path / "c.jsonl", [rec("ops/<b>x</b>/float32/forward", "fail", reason=hostile)],
                     env_id="host|<i>b</i>")
    assert cli.main([str(base), str(cand), "--format", "md"]) == 1
    md = capsys.readouterr().out
    assert "<script" not in md and "<img" not in md and "<b>" not in md and "<i>" not in md
    page = markdown_html(md)
    assert page.count("<table>") == markdown_tables(md) == 1
    assert "<script" not in page and "<img" not in page and "<b>" not in page and "<i>" not in page
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert hostile in text and "ops/<b>x</b>/float32/forward" in text and "host|<i>b</i>" in text


def test_a_reader_that_left_changes_nothing(files, tmp_path):
    from tests.test_report import _run_module
    out = tmp_path / "cmp.md"
    res = _run_module("tools.compare", str(files[0]), str(files[1]), "--format", "md", "--out", str(out),
                      stdout="closed")                                          # | head -0
    assert (res.returncode, res.stderr) == (1, "")    # the regressions' 1: the reader left, not the tool
    assert "## Regressions (8)" in out.read_text()
    same = write_run(tmp_path / "same.jsonl", BASELINE, run_id="r2")
    res = _run_module("tools.compare", str(files[0]), str(same), stdout="closed")
    assert (res.returncode, res.stderr) == (0, "")


def test_a_failure_whose_nan_became_the_devices_own_is_a_regression_and_the_reverse_an_improvement():
    """A check that failed with NaN the CPU gives too (float16 matrix_exp overflows on both) and
    still fails is silent under the status rule; when the candidate's NaN are no longer all the
    CPU's, the device gives NaN where the CPU gives numbers: what users lose, so a regression.
    Records without the count (an older judge's, the CPU's own) say nothing either way."""
    def nan(status="fail", **metrics):
        return rec("parity/matrix_exp/float16/forward", status, category="parity", target="mps",
                   reason="sample 0: 5 element(s) NaN or inf", **metrics)
    shared, own = nan(non_finite=4, non_finite_on_cpu=4), nan(non_finite=5, non_finite_on_cpu=4)
    assert [c[:2] for c in compare.compare_records(shared, own)] == [("regression", "parity-nan")]
    detail = compare.compare_records(shared, own)[0][2]
    assert "were all the CPU's too" in detail and "only 4 of 5" in detail and "the device's own" in detail
    assert [c[:2] for c in compare.compare_records(own, shared)] == [("improvement", "parity-nan")]
    assert compare.compare_records(shared, nan(non_finite=9, non_finite_on_cpu=9)) == []   # still all the CPU's
    assert compare.compare_records(nan(non_finite=4), own) == []                            # no count: cannot say
    assert [c[:2] for c in compare.compare_records(nan("pass"), own)] == [("regression", "status")]


def test_a_compiled_check_whose_nan_became_the_compilers_own_is_a_regression_named_for_eager():
    """A compiled check's yardstick is eager on the same device (non_finite_in_eager): NaN that
    were all eager's and are now partly the compiled function's own are a regression that says
    so in eager's name; the CPU is not named, nor is a count the record does not have."""
    def nan(**metrics):
        return rec("parity/compiled.softmax/float16/forward", "fail", category="parity", target="cuda",
                   reason="sample 0: NaN", **metrics)
    eager, own = nan(non_finite=4, non_finite_in_eager=4), nan(non_finite=6, non_finite_in_eager=4)
    (kind, rule, detail), = compare.compare_records(eager, own)
    assert (kind, rule) == ("regression", "parity-nan") and "were all eager's too" in detail
    assert "only 4 of 6" in detail and "the compiled function's own" in detail and "CPU" not in detail
    assert [c[:2] for c in compare.compare_records(own, eager)] == [("improvement", "parity-nan")]
    assert compare.compare_records(eager, nan(non_finite=7, non_finite_in_eager=7)) == []


def test_a_standing_parity_failure_that_got_much_further_off_is_a_warning():
    """fail -> fail said nothing, however far the kernel moved: a margin 30x the baseline's is
    a warning (the status rule keeps it from being a regression: it was failing already), with
    whether the deciding sample had the same inputs; a small move, or another suite, says nothing."""
    def off(margin, status="fail", check="parity/det/float32/backward", **metrics):
        return rec(check, status, category="parity", margin=margin, max_abs_err=margin * 1e-5, **metrics)
    found = compare.compare_records(off(1.5, inputs="aa bb", worst_sample=1), off(45.0, inputs="aa bb", worst_sample=1))
    assert [c[:2] for c in found] == [("warning", "parity-growth")], found
    assert "1.5 -> 45" in found[0][2] and "failing on both sides" in found[0][2]
    assert "sample 1 has the same inputs in both versions" in found[0][2]
    assert compare.compare_records(off(1.5), off(2.5)) == []                       # within the factor
    assert compare.compare_records(off(1.5, check="ops/det/float32/backward"),
                                   off(45.0, check="ops/det/float32/backward")) == []


def test_an_out_file_that_holds_something_else_is_refused_before_the_comparison(files, tmp_path, capsys):
    """`--out README.md` replaced the user's file with the comparison."""
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    assert cli.main([str(files[0]), str(files[1]), "--out", str(notes)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"error: --out {notes}: it holds something other than an upgrade check's comparison (it begins "
        "'# my notes'); replacing it would lose what it holds; give a new path or an earlier comparison\n")
    assert notes.read_text() == "# my notes\n"
    out = tmp_path / "cmp"   # an earlier comparison, in any of the formats, is replaced by one in any other
    for fmt in ("table", "md", "json", "table"):
        assert cli.main([str(files[0]), str(files[1]), "--format", fmt, "--out", str(out)]) == 1, capsys.readouterr()
        assert out.read_text().strip() == capsys.readouterr().out.strip()


def test_a_repeatable_check_that_starts_giving_other_bits_is_a_warning_not_a_regression():
    """Nondeterministic reruns, each as accurate as the first, pass the repeatable check: the
    status rule is silent, and a user who compares training runs bit for bit loses them."""
    check = "parity/matmul-3x3/float32/repeatable"
    same = rec(check, category="repeatable", reason="10 reruns gave the first run's bits")
    other = rec(check, category="repeatable", reason="other bits in 9 of 10 reruns", nondeterministic=True)
    found = compare.compare_records(same, other)
    assert found == [("warning", "nondeterministic", "now gives other bits on a rerun of the same inputs (each as "
                                                     "accurate as the first): other bits in 9 of 10 reruns")]
    assert compare.compare_records(other, same) == [("improvement", "nondeterministic",
                                                      "gives the first run's bits on every rerun again")]
    assert compare.compare_records(other, other) == [] and compare.compare_records(same, same) == []
    wrong = rec(check, "fail", category="unrepeatable", reason="other bits, wrong ones")
    assert [k for k, *_ in compare.compare_records(other, wrong)] == ["regression"]   # the status rule's


# --------------------------------------------------------------------------- two revisions of the parity judge

def judged_by(judge: int, status: str = "pass", check: str = "parity/matrix_exp/float16/forward", **metrics) -> dict:
    """A cuda parity record as revision ``judge`` of the parity judge writes it: revision 1 held
    the device against the CPU in the same dtype (``reference`` "cpu"), revision 2 holds it
    against float64 with the CPU's own error as the yardstick. The defaults are the recorded
    H100's float16 ``matrix_exp``: equal to the CPU bit for bit, NaN where float64 is a number
    (the CPU's too), so judge 1 passed it and judge 2 fails the same output."""
    said = (dict(reference="cpu", max_abs_err=0.0, margin=0.0, target_ref_err=0.0, cpu_ref_err=0.0,
                 more_accurate="same") if judge == 1 else
            dict(reference="float64", accuracy_source="float64, the CPU's own error the yardstick", max_abs_err=0.0,
                 margin="inf", vs_cpu_max_abs_err=0.0, target_ref_err=0.0, cpu_ref_err=0.0, more_accurate="same",
                 non_finite=25, cause="non-finite"))
    reason = "sample 0: 25 element(s) NaN or inf in float16 where float64 is a number" if status == "fail" else ""
    return rec(check, status, "parity", "cuda", reason, **{**said, **metrics})


def judged_runs(tmp_path, baseline: list[dict], candidate: list[dict], judges=(1, 2)):
    """A baseline and a candidate run file of one torch, written by the parity judges ``judges``."""
    def header_says(judge):
        return {} if judge == 1 else {"parity": judge}   # judge 1's headers named no judge
    tmp_path.mkdir(parents=True, exist_ok=True)
    return (write_run(tmp_path / "base.jsonl", baseline, judges=header_says(judges[0])),
            write_run(tmp_path / "cand.jsonl", candidate, run_id="r2", judges=header_says(judges[1])))


def test_a_verdict_that_only_the_judge_changed_is_no_regression_and_the_note_says_so_first(tmp_path, capsys):
    """The recorded H100's 12 'pass -> fail' regressions: judge 1 passed the output as equal to
    the CPU's, judge 2 fails the same output against float64. The yardstick changed, not torch:
    not comparable, a warning, exit 0, and one note before the tables says what to do."""
    base, cand = judged_runs(tmp_path, [judged_by(1)], [judged_by(2, "fail")])
    assert cli.main([str(base), str(cand)]) == 0
    text = capsys.readouterr().out
    result = compare.compare(compare.load_side([str(base)]), compare.load_side([str(cand)]))
    assert result.regressions == [] and result.unchanged == 0
    (change,) = result.changes
    assert (change.kind, change.rule, change.before, change.after) == ("warning", "judge", "pass", "fail")
    assert change.detail.startswith("not comparable: judged by parity judge 1 in the baseline, judge 2 in the "
                                    "candidate; keep the baseline again")
    (line,) = result.judges
    assert line.startswith("1 parity check(s) were judged by two revisions of the parity judge: judge 1 (agreement "
                           "with the CPU in the same dtype) wrote the baseline's records, judge 2")
    assert "not regressions" in line and "./compat baseline" in line
    assert text.index(f"note: {line}") < text.index("Warnings (1)")          # said first, not under the tables
    assert json.loads(compare.render(result, "json"))["notes"][0] == line
    assert f"**note: {line}**" in compare.render(result, "md")


@pytest.mark.parametrize("judge", [1, 2])
def test_the_same_judge_passing_then_failing_is_still_a_regression(tmp_path, capsys, judge):
    """The rules hold as ever between records of one judge, today's or an older one's (two old
    run files): only a change of judge is not compared."""
    base, cand = judged_runs(tmp_path, [judged_by(judge)], [judged_by(judge, "fail")], judges=(judge, judge))
    assert cli.main([str(base), str(cand)]) == 1
    result = compare.compare(compare.load_side([str(base)]), compare.load_side([str(cand)]))
    assert [(c.kind, c.rule) for c in result.changes] == [("regression", "status")]
    assert "two revisions" not in capsys.readouterr().out and not result.notes


def test_margins_of_two_judges_are_not_compared(tmp_path):
    """Judge 1's margin measured agreement with the CPU (0 where equal to it), judge 2's the
    error against float64: 336 'parity-growth' warnings on the recorded H100, same torch."""
    grown = dict(margin=0.6, max_abs_err=0.0625)
    across = compare.compare(*(compare.load_side([str(f)]) for f in judged_runs(
        tmp_path, [judged_by(1, margin=0.01)], [judged_by(2, non_finite=0, **grown)])))
    assert across.changes == [] and across.unchanged == 1 and len(across.judges) == 1
    same = compare.compare(*(compare.load_side([str(f)]) for f in judged_runs(
        tmp_path / "same", [judged_by(2, margin=0.01)], [judged_by(2, non_finite=0, **grown)], judges=(2, 2))))
    assert [(c.kind, c.rule) for c in same.changes] == [("warning", "parity-growth")]


def test_an_older_failure_is_judged_again_and_what_no_judge_says_is_compared_as_ever(tmp_path):
    """Judge 1 failed ``exp`` where the device was as accurate as the CPU: judged again from its
    metrics it passes, as it does under judge 2 (unchanged, no 'improvement'); where judge 2
    fails it, the estimate does not make a regression (not comparable). An error is no judge's
    word: a pass that now errors is a regression whichever judge wrote the pass."""
    cleared = judged_by(1, "fail", "parity/exp/float16/forward", max_abs_err=1e-3, margin=3.0, target_ref_err=1e-3,
                        cpu_ref_err=1e-3)
    errs = rec("parity/add/float16/forward", "error", "n/a", "cuda", "RuntimeError: CUDA error")
    base, cand = judged_runs(tmp_path, [cleared, judged_by(1, check="parity/add/float16/forward")],
                             [judged_by(2, check="parity/exp/float16/forward", non_finite=0, margin=0.4), errs])
    result = compare.compare(compare.load_side([str(base)]), compare.load_side([str(cand)]))
    assert [(c.check, c.kind, c.rule) for c in result.changes] == [
        ("parity/add/float16/forward", "regression", "status")]
    assert result.unchanged == 1 and "2 parity check(s)" in result.judges[0]
    base, cand = judged_runs(tmp_path / "fails", [cleared], [judged_by(2, "fail", "parity/exp/float16/forward")])
    (change,) = compare.compare(compare.load_side([str(base)]), compare.load_side([str(cand)])).changes
    assert (change.kind, change.rule) == ("warning", "judge")
    assert "the baseline's fail would read pass today (an estimate from its largest errors)" in change.detail


def test_the_recorded_h100_runs_of_one_torch_under_two_judges_regress_nothing(capsys):
    """The same torch build and GPU, recorded on 2026-11-22 (parity judge 1) and 2026-11-24
    (judge 2): 12 regressions, 336 warnings and 342 improvements that were the judge's, among
    them 9 'the kernel's result changed'; what remains is the 8 checks judge 2 skips."""
    from tests.conftest import recorded_h100, recorded_h100_controls
    assert cli.main([str(recorded_h100()), str(recorded_h100_controls()), "--partial", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    kinds = Counter((c["kind"], c["rule"]) for c in out["changes"] if c["kind"] not in ("appeared", "disappeared"))
    assert kinds == {("warning", "judge"): 86, ("warning", "coverage"): 8}
    assert out["notes"][0].startswith("4,824 parity check(s) were judged by two revisions of the parity judge")
    assert not any("kernel's result changed" in c["detail"] for c in out["changes"])


def test_the_reports_baseline_card_takes_the_change_of_judge_the_same_way(tmp_path):
    """The page's "against the baseline" compares each column with the baseline by these rules
    (harness.report.speed.against_baseline); the column's records are judged again already
    (matrix.build), which a page of older runs against a newer baseline reads."""
    from harness.report.matrix import build
    from harness.report.speed import against_baseline
    for older_first in (True, False):
        base, cand = judged_runs(tmp_path / str(older_first), [judged_by(1)], [judged_by(2, "fail")])
        if not older_first:   # a baseline kept today, a page of runs written by judge 1
            base, cand = judged_runs(tmp_path / "newer", [judged_by(2, "fail")], [judged_by(1)], judges=(2, 1))
        found = against_baseline(build(runfiles.read_file(cand).runs), compare.load_side([str(base)]))
        (against,) = found.values()
        assert [(c.kind, c.rule) for c in against.changes] == [("warning", "judge")] and against.compared == 1


def test_every_revision_of_a_judge_has_the_words_a_comparison_across_two_names():
    from harness.core import records
    assert {suite: set(words) for suite, words in records.YARDSTICKS.items()} == {
        suite: set(range(1, n + 1)) for suite, n in records.JUDGES.items()}


def test_a_standing_failure_that_now_gives_the_devices_own_nan_is_a_regression():
    """A check that failed with finite errors and now fails with NaN the CPU does not give: the
    status rule is silent (a failure stays one), the margin rule sees no figure (an infinite
    margin), and the older NaN rule asked the baseline to have NaN already: it read unchanged."""
    def failed(**metrics):
        return rec("parity/pow/float16/forward", "fail", category="parity", target="mps",
                   reason="sample 2: 3 element(s) NaN or inf", **metrics)
    finite = failed(margin=4.5, max_abs_err=0.02)
    own = failed(margin="inf", non_finite=3, non_finite_on_cpu=1)
    (kind, rule, detail), = compare.compare_records(finite, own)
    assert (kind, rule) == ("regression", "parity-nan")
    assert "failed with finite errors (margin 4.5)" in detail and "only 1 of 3 are the CPU's too" in detail
    # NaN the CPU gives at the same elements too: further off, not the device's doing
    (kind, rule, detail), = compare.compare_records(finite, failed(margin="inf", non_finite=3, non_finite_on_cpu=3))
    assert (kind, rule) == ("warning", "parity-nan") and "all the CPU's too" in detail
    # the CPU's own record (no CPU beside it to share with): further off, said
    (kind, rule, _), = compare.compare_records(finite, failed(margin="inf", non_finite=3))
    assert (kind, rule) == ("warning", "parity-nan")
    # the other way: the device's own NaN gone, a finite failure left
    (kind, rule, detail), = compare.compare_records(own, finite)
    assert (kind, rule) == ("improvement", "parity-nan") and "now it fails with finite errors" in detail
    # a finite failure that stays finite is the margin rule's, as before
    assert compare.compare_records(finite, failed(margin=5.0, max_abs_err=0.02)) == []


def test_a_side_of_one_environment_id_with_two_transformers_is_refused(tmp_path):
    """The environment id is host, Python and torch: a candidate with transformers 5.24 cut off
    at 6 of 10 checks, in one folder with a whole run of 5.23, was filled in with 5.23's records
    and read "10 unchanged"."""
    folder = tmp_path / "runs"
    folder.mkdir()
    checks = [f"ops/op{i}/float32/forward" for i in range(10)]
    for name, version, until, started in (("old", "5.23.0", 10, "2026-12-01"), ("new", "5.24.0", 6, "2026-12-02")):
        w = runfiles.Writer(folder / f"{name}.jsonl")
        w.write({**runfiles.header(name, "host-a-torch2.8", {"host": "host-a", "packages": {
            "torch": "2.8.0", "transformers": version}}), "started": f"{started}T00:00:00+00:00"})
        for check in checks[:until]:
            w.write({**rec(check), "run": name})
        w.close()   # the 5.24 run was cut off: no end line; the 5.23 run's is missing too, harmlessly
    with pytest.raises(compare.CompareError) as err:
        compare.load_side([str(folder)], "candidate")
    assert "#1: transformers 5.23.0; #2: transformers 5.24.0" in str(err.value) and "--latest" in str(err.value)
    newest = compare.load_side([str(folder)], "candidate", latest=True)      # the newest run alone is one stack
    assert len(newest.records) == 6 and not newest.complete


def test_a_candidate_killed_between_two_lines_fails_the_check_unless_partial(tmp_path):
    """A run killed between lines reads back whole, with no end line: with half its checks in
    common it once compared clean and exited 0, where the crash partway was the upgrade's."""
    from tests.test_report import _run_module
    checks = [rec(f"ops/op{i}/float32/forward") for i in range(10)]
    base = write_run(tmp_path / "base.jsonl", checks)
    cut = write_run(tmp_path / "cut.jsonl", checks[:7], run_id="r2", end=False)
    res = _run_module("tools.compare", str(base), str(cut))
    assert res.returncode == 2 and res.stdout == "", res.stdout
    line, = res.stderr.strip().splitlines()
    assert "cut off before its end" in line and "7 checks" in line and "--partial" in line
    res = _run_module("tools.compare", str(base), str(cut), "--partial")
    assert res.returncode == 0 and "3 disappeared" in res.stdout and "cut off or interrupted" in res.stdout
    res = _run_module("tools.compare", str(cut), str(base))                  # a cut-off baseline alike
    assert res.returncode == 2 and "baseline" in res.stderr
    whole = write_run(tmp_path / "whole.jsonl", checks, run_id="r3")
    assert _run_module("tools.compare", str(base), str(whole)).returncode == 0


def test_a_known_limitation_whose_nan_became_the_devices_own_or_got_further_off_is_said():
    """xfail -> xfail read nothing: the NaN rule asked both sides to fail, and the margin rule
    left known limitations out, so a documented float16 limit that starts to give NaN the CPU
    does not (what users lose), or moves 30x further off, passed the check."""
    def limit(**metrics):
        return rec("parity/matrix_exp/float16/forward", "xfail", category="parity", target="mps",
                   reason="precision limit: sample 0: NaN or inf", **metrics)
    shared, own = limit(non_finite=4, non_finite_on_cpu=4), limit(non_finite=5, non_finite_on_cpu=4)
    (kind, rule, detail), = compare.compare_records(shared, own)
    assert (kind, rule) == ("regression", "parity-nan") and "only 4 of 5" in detail and "the device's own" in detail
    assert [c[:2] for c in compare.compare_records(own, shared)] == [("improvement", "parity-nan")]
    finite = limit(margin=1.5, max_abs_err=0.01)
    (kind, rule, detail), = compare.compare_records(finite, limit(margin="inf", non_finite=3, non_finite_on_cpu=1))
    assert (kind, rule) == ("regression", "parity-nan") and "failed with finite errors (margin 1.5)" in detail
    (kind, rule, detail), = compare.compare_records(finite, limit(margin=45.0, max_abs_err=0.3))
    assert (kind, rule) == ("warning", "parity-growth") and "1.5 -> 45" in detail and "known limitation" in detail
    assert compare.compare_records(finite, limit(margin=2.0, max_abs_err=0.013)) == []   # within the factor
    assert compare.compare_records(shared, limit(non_finite=9, non_finite_on_cpu=9)) == []   # still all the CPU's


def _sides(tmp_path, base_recs, cand_recs):
    where = tmp_path / str(len(list(tmp_path.iterdir())))
    where.mkdir()
    a = write_run(where / "a.jsonl", base_recs, run_id="a")
    b = write_run(where / "b.jsonl", cand_recs, env_id="host-a-torch2.15", torch_version="2.15.0", run_id="b")
    return compare.load_side([str(a)]), compare.load_side([str(b)])


def test_an_accelerator_the_candidate_lost_is_a_regression_not_only_warnings(tmp_path):
    """A torch that no longer supports this macOS skips every mps check ("MPS unavailable"):
    each was a coverage warning, and the upgrade check exited 0. Now one target-lost
    regression per target says so; a target that still runs some checks, or the CPU, is not lost."""
    why = "MPS unavailable: torch 2.15 and newer support MPS on macOS 15+ only"
    names = [f"parity/{op}/float32/forward" for op in ("gelu", "exp", "softmax")]
    base = [rec(n, target="mps", category="parity") for n in names] + [rec("env/threads")]
    cand = [rec(n, "skip", target="mps", reason=why) for n in names] + [rec("env/threads")]
    cmp = compare.compare(*_sides(tmp_path, base, cand))
    [lost] = [c for c in cmp.regressions]
    assert (lost.rule, lost.target) == ("target-lost", "mps") and why in lost.detail and "3" in lost.after
    assert len([c for c in cmp.of("warning") if c.rule == "coverage"]) == 3
    # one mps check still runs: not lost, each skip stays a coverage warning
    cand[0] = rec(names[0], target="mps", category="parity")
    assert not compare.compare(*_sides(tmp_path, base, cand)).regressions
    # skipped on both sides: nothing was lost
    skipped = [rec(n, "skip", target="mps", reason=why) for n in names]
    assert not compare.compare(*_sides(tmp_path, skipped, skipped)).regressions


def test_perf_times_not_compared_are_not_counted_unchanged(tmp_path):
    """A time measured at another thread count is not compared (a note says so): it was also
    counted "unchanged", so a 5x slower softmax read "0 regressions ... 1 unchanged"."""
    t = dict(category="timed", median_s=1e-3, ci_low=0.9e-3, ci_high=1.1e-3)
    base = [rec("perf/softmax/float32/forward", threads=2, **t), rec("env/threads")]
    slow = dict(t, median_s=5e-3, ci_low=4.9e-3, ci_high=5.1e-3)
    cand = [rec("perf/softmax/float32/forward", threads=1, **slow), rec("env/threads")]
    cmp = compare.compare(*_sides(tmp_path, base, cand))
    assert not cmp.changes and cmp.unchanged == 1 and cmp.uncompared_times == 1
    assert "1 unchanged, 1 perf time(s) not compared" in compare.render(cmp, "table")


def test_another_python_in_the_candidate_is_a_version_change():
    """A candidate built on another interpreter (tox's first python3, not .venv's) showed only
    the package changes, so Python 3.12 -> 3.13 read as the SPEC's doing."""
    def side(py):
        header = {"facts": {"packages": {"torch": "2.15.0"}, "python": {"version": py}}}
        return compare.Side("x", "e", header, {}, True, [])
    cmp = compare.Comparison(side("3.12.7"), side("3.13.1"), [], 0, 2.0, 0.01)
    assert cmp.version_changes() == [("python", "3.12.7", "3.13.1")]
    assert compare.Comparison(side("3.12.7"), side("3.12.7"), [], 0, 2.0, 0.01).version_changes() == []


def test_a_fallback_read_by_another_revision_of_the_ops_suite_is_not_a_regression(tmp_path):
    """The ops suite now reads each phase's fallbacks apart and the MPS kernels' own warnings
    too (metrics' fallback_reader 2): a baseline kept before it read complex nonzero native (its
    in-kernel warning unseen), and the upgrade check called the same kernel a regression."""
    old = [rec("ops/nonzero/complex64/forward", category="native", target="mps"),
           rec("ops/linalg.inv/float32/forward", category="cpu-fallback", target="mps",
               fallback_ops=["aten::_linalg_svd"])]
    new = [rec("ops/nonzero/complex64/forward", category="cpu-fallback", target="mps",
               fallback_ops=["aten::nonzero (in-kernel)"], fallback_reader=2),
           rec("ops/linalg.inv/float32/forward", category="native", target="mps", fallback_reader=2)]
    cmp = compare.compare(*_sides(tmp_path, old, new))
    assert not cmp.regressions and not cmp.of("improvement")
    assert [(c.kind, c.rule) for c in cmp.changes] == [("warning", "fallback")] * 2
    assert all("not comparable" in c.detail and "./compat baseline" in c.detail for c in cmp.changes)
    # read alike, a change is the versions': the rule as ever
    cmp = compare.compare(*_sides(tmp_path, [dict(new[1])], [dict(new[0], check="ops/linalg.inv/float32/forward",
                                                                    subject="linalg.inv", nodeid="x")]))
    assert [(c.kind, c.rule) for c in cmp.changes] == [("regression", "fallback")]
