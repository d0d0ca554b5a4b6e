"""The upgrade gate never passes on nothing, never loses a failed measurement, and never takes a
comparison across different load at face value (issue 26): harness/report/compare.py,
tools/compare.py and tools/cli.py, the load readings of harness/env/timing.py, and the workload
tags the optim and perf suites put on a record before they measure."""
import json
import os
import subprocess
import sys

import pytest

from harness.core.records import Category, target_of
from harness.env import timing
from harness.optim import ratios
from harness.perf import against, models, ops
from harness.report import compare
from tests.conftest import ROOT, run_suite
from tests.test_compare import BASELINE, candidate_records, rec, write_run
from tools import compare as cli


def _side(records, label="side"):
    return compare.Side(label, "env", {"facts": {"host": "h"}},
                        {(r["check"], target_of(r)): r for r in records}, True, [])


# --------------------------------------------------------------------------- a gate that compared nothing


def test_runs_with_nothing_in_common_are_an_error_never_a_pass(tmp_path, capsys):
    ops_run = write_run(tmp_path / "ops.jsonl", [rec(f"ops/op{i}/float32/forward") for i in range(5)])
    env_run = write_run(tmp_path / "env.jsonl", [rec("env/threads"), rec("env/macos-version", target="mps")])
    for extra in ([], ["--partial"]):         # --partial accepts a partial overlap, never none
        assert cli.main([str(ops_run), str(env_run), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured
        err = captured.err
        assert err.startswith("error: ") and "0 in common" in err
        assert "5 checks (ops; cpu)" in err and "2 checks (env; cpu, mps)" in err
        assert "same selection" in err


def test_a_small_overlap_is_an_error_unless_partial_is_given(tmp_path, capsys):
    shared = [rec(f"ops/op{i}/float32/forward") for i in range(2)]
    base = write_run(tmp_path / "b.jsonl", shared + [rec(f"ops/old{i}/float32/forward") for i in range(8)])
    cand = write_run(tmp_path / "c.jsonl", shared + [rec(f"parity/new{i}/float32/forward", category="parity")
                                                     for i in range(8)])
    assert cli.main([str(base), str(cand)]) == 2
    err = capsys.readouterr().err
    assert "2 in common" in err and "--partial" in err and err.count("\n") == 1
    assert cli.main([str(base), str(cand), "--partial"]) == 0
    out = capsys.readouterr().out
    assert "8 appeared, 8 disappeared, 2 unchanged" in out


def test_pytest_baseline_judges_the_overlap_from_this_runs_side():
    baseline = _side([rec(f"ops/op{i}/float32/forward") for i in range(20)], "--baseline b.jsonl")
    subset = _side([rec("ops/op3/float32/forward"), rec("ops/op4/float32/forward")], "this run")
    # a -k subset of the baseline is the normal case: every one of this run's checks is in the baseline
    assert compare.overlap_problem(baseline, subset, compare.FROM_CANDIDATE) is None
    assert "2 in common" in compare.overlap_problem(baseline, subset)      # tools.compare's rule: both sides
    elsewhere = _side([rec("env/threads"), rec("env/x"), rec("ops/op3/float32/forward")], "this run")
    problem = compare.overlap_problem(baseline, elsewhere, compare.FROM_CANDIDATE)
    assert problem is not None and "1 of this run's 3 checks" in problem and "--save-baseline" in problem
    assert "\n" not in problem


def test_a_candidate_that_lost_checks_says_how_many_in_its_summary_line(tmp_path, capsys):
    base = write_run(tmp_path / "b.jsonl", BASELINE)
    lost = [r for r in candidate_records() if not r["check"].startswith("parity/")]
    cand = write_run(tmp_path / "c.jsonl", lost, env_id="host-a-torch2.10")
    cli.main([str(base), str(cand)])                       # without --all
    summary = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert "7 disappeared" in summary, summary


# --------------------------------------------------------------------------- a measurement that raises

OOM_PLUGIN = '''
"""-p oom_plugin: every claim's measurement raises in the sandbox (out of memory)."""
from harness.core import isolate

_real_call = isolate.Sandbox.call


def _call(self, target, *args, timeout=None):
    if target.endswith(":measure_claim"):
        return isolate.Outcome("raised", detail="OutOfMemoryError: CPU out of memory (injected by the test)")
    return _real_call(self, target, *args, timeout=timeout)


isolate.Sandbox.call = _call
'''


def test_a_claim_whose_measurement_raises_keeps_its_workload_and_regresses(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "oom_plugin.py").write_text(OOM_PLUGIN)
    path = os.pathsep.join(filter(None, [str(plugins), str(ROOT), os.environ.get("PYTHONPATH")]))
    res, records = run_suite(tmp_path, "suites/optim/test_claims.py", "optim and cpu", "-k",
                             "adafactor-memory and not trainer", "--workload", "small", "-p", "oom_plugin",
                             env={"PYTHONPATH": path})
    assert [r["status"] for r in records] == ["fail"], res.stdout[-3000:]
    failed = records[0]
    assert "out of memory" in failed["reason"]
    assert failed["metrics"]["workload"] == "small"            # tagged before the measurement
    holds = rec("optim/adafactor/memory", category="holds", workload="small", mem_ratio=0.48, ci_low=0.48,
                ci_high=0.48, bound=0.62)
    result = compare.compare(_side([holds]), _side([{**failed, "run": "?"}]))
    assert [(c.kind, c.rule, c.target) for c in result.changes] == [
        ("regression", "status", "cpu [small workload]")]


def test_a_record_without_its_workload_tag_is_matched_with_caution():
    holds = rec("optim/adafactor/memory", category="holds", workload="small", mem_ratio=0.48, ci_low=0.48,
                ci_high=0.48, bound=0.62)
    untagged = rec("optim/adafactor/memory", "fail", reason="the measurement failed: OutOfMemoryError")
    for a, b in ((holds, untagged), ({**untagged, "status": "pass"}, {**holds, "status": "fail"})):
        result = compare.compare(_side([a, rec("env/threads")]), _side([b, rec("env/threads")]))
        assert [(c.kind, c.rule, c.target) for c in result.changes] == [
            ("regression", "status", "cpu [small workload]")]
        assert "no workload tag" in result.changes[0].detail
        assert any("workload tag" in note for note in result.notes)
    # two workloads the untagged record might belong to: not guessed, both listed apart
    large = {**holds, "metrics": {**holds["metrics"], "workload": "large"}}
    result = compare.compare(_side([holds, large]), _side([untagged]))
    assert sorted(c.kind for c in result.changes) == ["appeared", "disappeared", "disappeared"]


# --------------------------------------------------------------------------- comparisons across different load

def _load(before, after=None, cpus=2):
    return {"load": {"before": before, "after": before if after is None else after, "cpus": cpus}}


def _perf(median, **metrics):
    """A time measured again in fresh processes, as a candidate run with --baseline records one."""
    return rec("perf/mul/float32/forward", category=Category.TIMED, median_s=median, ci_low=median * 0.97,
               ci_high=median * 1.03, control_s=0.001, threads=1, confirmation={"processes": 3}, **metrics)


SAME = ("vm / 2 cpus", "vm / 2 cpus")


def test_a_perf_slowdown_under_different_load_is_inconclusive_not_a_regression():
    busy_base, quiet = _perf(1e-3, **_load(5.0, 4.6)), _perf(2e-3, **_load(0.4, 0.6))
    found = compare.compare_records(_perf(1e-3, **_load(0.5)), quiet, machines=SAME)
    assert [f[:2] for f in found] == [("regression", "perf-time")]                        # comparable load
    found = compare.compare_records(quiet, _perf(4e-3, **_load(5.0)), machines=SAME)
    assert [f[:2] for f in found] == [("warning", "perf-time")]
    assert ("inconclusive: the baseline was measured under load 0.3 per core, the candidate under 2.5"
            in found[0][2]), found[0][2]
    found = compare.compare_records(busy_base, quiet, machines=SAME)    # whichever side was the busy one
    assert [f[:2] for f in found] == [("warning", "perf-time")] and "under load 2.5 per core" in found[0][2]
    # an older file without load readings: the load is unknown, and today's rule stands
    found = compare.compare_records(_perf(1e-3), _perf(2e-3, **_load(0.5)), machines=SAME)
    assert [f[:2] for f in found] == [("regression", "perf-time")] and "load unknown" in found[0][2]


def _time_claim(ratio, **metrics):
    return rec("optim/fused-adamw/time", category="holds", workload="small", time_ratio=ratio, ci_low=ratio * 0.95,
               ci_high=ratio * 1.05, bound=0.95, **metrics)


def test_a_time_claim_worse_under_different_load_is_inconclusive_not_a_regression():
    busy, quiet = _time_claim(0.093, **_load(3.2, 2.9)), _time_claim(0.256, **_load(0.4))
    found = compare.compare_records(busy, quiet)
    assert [f[:2] for f in found] == [("warning", "claim-ratio")], found
    assert "inconclusive: the baseline was measured under load 1.6 per core, the candidate under 0.2" in found[0][2]
    found = compare.compare_records(_time_claim(0.093, **_load(0.3)), quiet)
    assert [f[:2] for f in found] == [("regression", "claim-ratio")]
    found = compare.compare_records(_time_claim(0.093), quiet)
    assert [f[:2] for f in found] == [("regression", "claim-ratio")] and "load unknown" in found[0][2]
    # a held time claim that no longer holds, under another load: the same caution
    broken = {**_time_claim(1.2, **_load(0.4)), "status": "xfail", "category": "does-not-hold"}
    found = compare.compare_records(busy, broken)
    assert [f[:2] for f in found] == [("warning", "claim")], found


def test_a_held_time_claim_now_too_close_to_call_says_so():
    """A held claim turned inconclusive: the warning says whether its ratio moved into the zone
    around the bound (too close to call) or time ran out before a verdict."""
    held = _time_claim(0.80)
    close = {**_time_claim(0.96, stopped="zone"), "status": "xfail", "category": "inconclusive"}
    late = {**_time_claim(0.90, stopped="budget"), "status": "xfail", "category": "inconclusive"}
    found = compare.compare_records(held, close)
    assert ("warning", "claim", "the claim held; now its ratio is too close to the bound to call") in found, found
    found = compare.compare_records(held, late)
    assert ("warning", "claim", "the claim held; now no verdict within the time budget") in found, found
    idle = {**_time_claim(0.90, stopped="loading-not-the-bottleneck"), "status": "xfail", "category": "inconclusive"}
    found = compare.compare_records(held, idle)   # DataLoader workers: no time budget ran out
    assert ("warning", "claim", "the claim held; now loading is no bottleneck here, so it is not judged") in found


def test_markedly_different_load_is_defined_per_core():
    assert against.load_apart({"load": {"before": 1.0, "after": 1.0, "cpus": 2}},
                              {"load": {"before": 1.9, "after": 1.9, "cpus": 2}}) is None    # 0.5 vs 0.95
    assert against.load_apart({"load": {"before": 1.0, "after": 1.0, "cpus": 2}},
                              {"load": {"before": 2.2, "after": 2.2, "cpus": 2}}) is not None
    assert against.load_apart({"load": {"before": 8.0, "after": 8.0, "cpus": 16}},
                              {"load": {"before": 12.0, "after": 12.0, "cpus": 16}}) is None
    assert against.load_apart({}, {"load": {"before": 9.0, "after": 9.0, "cpus": 2}}) is None      # unknown
    assert against.load_apart({"load": {"before": None, "after": None, "cpus": 2}},
                              {"load": {"before": 9.0, "after": 9.0, "cpus": 2}}) is None


def test_time_measurements_record_the_machines_load(monkeypatch):
    with timing.load_during() as load:
        pass
    assert set(load) == {"before", "after", "cpus"} and load["cpus"] == os.cpu_count()
    assert isinstance(load["before"], float) and isinstance(load["after"], float)   # Linux has getloadavg
    monkeypatch.delattr(os, "getloadavg")                      # Windows has none: the load is unknown
    with timing.load_during() as unknown:
        pass
    assert unknown == {"before": None, "after": None, "cpus": os.cpu_count()}
    monkeypatch.undo()
    found = ratios.compare_time(lambda: None, lambda: None, ratios.Bound("not-higher", 2.0), rounds=4, budget_s=0.0,
                                resamples=50)
    assert set(found["load"]) == {"before", "after", "cpus"}
    from harness.optim import techniques   # an optimization claim's record keeps the reading beside its ratio
    kept = techniques.claim_run(found, claim="tf32", quantity="time", kind="not-higher", bound=2.0,
                                claimed_ratio=None, source="", baseline="a", variant="b")
    assert kept.measured["load"] == found["load"]
    run = {"median_s": 1e-3, "ci_low": 9e-4, "ci_high": 1.1e-3, "rounds": 9, "width": 0.2, "noisy": False,
           "clock": "wall clock", "durations": [1e-3] * 9, "op": "add", "dtype": "float32", "pass": "forward",
           "shape": "s", "load": {"before": 0.5, "after": 0.7, "cpus": 2}}
    assert ops.judge(run).metrics["load"] == run["load"]


def test_the_perf_entries_read_the_load_around_the_measurement(monkeypatch):
    monkeypatch.setattr(models, "import_models", lambda: 0.0)
    monkeypatch.setitem(models.MEASURE, "train-step", lambda arch, device, workload: {"what": "train-step"})
    found = models.measure("bert", "train-step", "cpu", "small")
    assert set(found["load"]) == {"before", "after", "cpus"}
    shape = {"per_shape_s": 1e-3, "ci_low": 0.0, "ci_high": 2e-3, "fixed_s": 0.1, "first_sight_s": 0.1,
             "seen_s": 0.1, "lengths": [3], "fixed_length": 4, "batch": 2, "clock": "wall clock", "threads": 1,
             "control_s": 1e-3, "model": "m", "durations_first": [0.1], "durations_seen": [0.1],
             "load": found["load"]}
    assert models.shape_verdict(shape).metrics["load"] == found["load"]


# --------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("option, value", [("--floor", "nan"), ("--floor", "-0.1"), ("--floor", "inf"),
                                           ("--factor", "nan"), ("--factor", "inf"), ("--factor", "-2"),
                                           ("--factor", "1")])
def test_a_factor_or_floor_that_is_no_number_to_compare_by_is_refused_when_parsed(option, value, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["missing-a.jsonl", "missing-b.jsonl", f"{option}={value}"])   # parsed before any file is read
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: argument {option}") and "no such file" not in err


def _regressed_files(tmp_path):
    base = write_run(tmp_path / "b.jsonl", BASELINE)
    cand = write_run(tmp_path / "c.jsonl", candidate_records(), env_id="host-a-torch2.10", torch_version="2.10.0")
    return str(base), str(cand)


def test_the_verdicts_exit_status_survives_a_closed_stdout(tmp_path):
    base, cand = _regressed_files(tmp_path)
    out = tmp_path / "cmp.json"
    res = subprocess.run([sys.executable, "-m", "tools.compare", base, cand, "--format", "json", "--out", str(out)],
                         cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1))   # >&-
    assert (res.returncode, res.stderr) == (1, "")
    assert json.loads(out.read_text())["counts"]["regression"] == 8


def _c_locale():
    """The C locale with Python's UTF-8 mode off (PYTHONUTF8=0): the ASCII stdout Python gives
    where the locale names no encoding and UTF-8 mode is not on (Python 3.6, a build or
    launcher that turns it off). PYTHONIOENCODING unset, so nothing overrides it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANGUAGE")}
    return {**env, "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}


def test_the_compare_table_prints_lines_in_the_c_locale(tmp_path):
    base = write_run(tmp_path / "b.jsonl", [rec("ops/a/float32/forward"), rec("ops/b/float32/forward")])
    broken = rec("ops/a/float32/forward", "fail", reason="caf\u00e9 \u2192 " + "x" * 200)
    cand = write_run(tmp_path / "c.jsonl", [broken, rec("ops/b/float32/forward")])
    res = subprocess.run([sys.executable, "-m", "tools.compare", str(base), str(cand)], cwd=ROOT, env=_c_locale(),
                         capture_output=True)
    assert res.returncode == 1 and res.stderr == b""
    text = res.stdout.decode("ascii")                     # nothing but ASCII reached the ASCII stream
    lines = text.splitlines()
    assert len(lines) > 10 and "\\n" not in text
    row = next(line for line in lines if line.startswith("ops/a/float32/forward"))
    assert "caf\\xe9 \\u2192 xxx" in row
    assert lines[-1].startswith("1 regression(s)")


def test_the_pytest_summary_tables_print_lines_in_the_c_locale(tmp_path):
    """The end-of-session tables (this run's, the comparison's) hold symbols an ASCII stream
    cannot; pytest's terminal writer then escapes the whole text it was given, newlines too,
    so a table written in one piece became one line of literal \\n."""
    baseline = write_run(tmp_path / "kept.jsonl", [
        rec("env/tokenizers-native", "fail", reason="caf\u00e9 \u2192 broken")])
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/env", "-q", "-p", "no:cacheprovider",
                          "-k", "cpu-tokenizers-native", "--run-file", str(tmp_path / "run.jsonl"),
                          "--baseline", str(baseline)], cwd=ROOT, env=_c_locale(), capture_output=True, timeout=600)
    text = res.stdout.decode("ascii", "replace")
    assert "mps-compat: this run" in text, text[-3000:]
    assert "\\n" not in text, text[-3000:]
    section = text[text.index("mps-compat: this run"):].splitlines()
    assert any(line.startswith("suite") and "target" in line for line in section)


def test_an_error_line_from_a_files_contents_stays_one_visible_line(capsys):
    """A message quoting a file (a NUL, a newline, an escape sequence in a run id) is one line on
    stderr, each control character spelt out: it neither acts on the terminal nor breaks in two."""
    from tools import cli as tools_cli
    assert tools_cli.error("run 'a\x00b\nc\x1b[31m': bad") == 2
    err = capsys.readouterr().err
    assert err == "error: run 'a\\x00b\\x0ac\\x1b[31m': bad\n", err


@pytest.mark.parametrize("tool", ["audit", "compare", "kernels", "rejudge", "render_check", "report", "upgrade",
                                  "workload"])
def test_each_tools_help_opens_with_its_whole_first_paragraph(tool, capsys):
    """`python -m tools.workload --help` said "...: this machine's targets, or a" and
    stopped: the description was the docstring's first line, not its first sentence."""
    import importlib
    module = importlib.import_module(f"tools.{tool}")
    try:
        status = module.main(["--help"])
    except SystemExit as ended:
        status = ended.code
    assert status == 0
    said = " ".join(capsys.readouterr().out.split())
    first = " ".join(module.__doc__.strip().split("\n\n")[0].split())
    assert first.endswith((".", ")")) and first in said, (first, said[:400])


def test_a_run_judged_from_its_side_lists_no_baseline_check_it_did_not_set_out_to_run(tmp_path):
    """`pytest suites -m env --baseline B` listed B's 84 parity checks as disappeared: checks
    this run never asked for buried the ones that went. The baseline is narrowed to the suites
    and targets the run took whole; a check missing there is still disappeared."""
    baseline = compare.load_side([str(write_run(tmp_path / "b.jsonl", [
        rec("env/python-arm64"), rec("env/tokenizers-native"), rec("env/gone-check"),
        rec("parity/add/float32/forward"), rec("parity/mm/float32/forward"),
        rec("env/python-arm64", target="mps")]))])

    def run_of(records, **selection):
        side = compare.load_side([str(write_run(tmp_path / f"r{len(list(tmp_path.iterdir()))}.jsonl", records,
                                                run_id="r2"))])
        side.header["selection"] = {"markexpr": "", "keyword": "", "args": ["suites"], **selection}
        return side
    env_run = run_of([rec("env/python-arm64"), rec("env/tokenizers-native")], markexpr="env and cpu")
    asked, outside = compare.within_selection(baseline, env_run)
    assert outside == 3   # the two parity checks and the mps one: not asked for
    cmp = compare.compare(asked, env_run)
    assert [c.check for c in cmp.of("disappeared")] == ["env/gone-check"]   # env on cpu taken whole: it went
    keyword_run = run_of([rec("parity/add/float32/forward")], markexpr="parity", keyword="add")
    asked, outside = compare.within_selection(baseline, keyword_run)
    assert outside == 5 and not compare.compare(asked, keyword_run).of("disappeared")   # -m parity: not whole
    # `pytest suites -k "mm or gone" --baseline B`: what the -k matches and did not run went; the rest was not asked
    keyword_alone = run_of([rec("parity/add/float32/forward")], keyword="mm or gone")
    asked, outside = compare.within_selection(baseline, keyword_alone)
    assert sorted(c.check for c in compare.compare(asked, keyword_alone).of("disappeared")) == [
        "env/gone-check", "parity/mm/float32/forward"] and outside == 3


def test_a_marker_selection_counts_the_opt_in_family_it_leaves_out_as_not_asked(tmp_path):
    """`-m parity` selects every parity check but the compile family (opt-in: it must be
    named), as pytest's run did: a plain parity check it lacks disappeared, a compiled one was
    not asked for; `-m "parity or compile"` asked for both."""
    baseline = compare.load_side([str(write_run(tmp_path / "b.jsonl", [
        rec("parity/add/float32/forward"), rec("parity/mm/float32/forward"),
        rec("parity/compiled.softmax/float16/backward")]))])
    for markexpr, gone, outside in (("parity", ["parity/mm/float32/forward"], 1),
                                    ("parity or compile", ["parity/compiled.softmax/float16/backward",
                                                           "parity/mm/float32/forward"], 0)):
        run = compare.load_side([str(write_run(tmp_path / f"{outside}.jsonl", [rec("parity/add/float32/forward")],
                                               run_id="r2"))])
        run.header["selection"] = {"markexpr": markexpr, "keyword": "", "args": ["suites"]}
        asked, left = compare.within_selection(baseline, run)
        assert sorted(c.check for c in compare.compare(asked, run).of("disappeared")) == gone and left == outside


def test_a_baseline_of_the_same_narrowed_selection_keeps_its_disappeared_checks(tmp_path):
    """The documented flow: `./compat baseline -m "parity and cpu"`, then the candidate with the
    same -m: the baseline's checks were made by the same selection, so one the candidate lacks
    did disappear, whatever the selection (here a -k too, which no record's node id decides)."""
    def side(name, records, run_id):
        made = compare.load_side([str(write_run(tmp_path / name, records, run_id=run_id))])
        made.headers[run_id]["selection"] = {"markexpr": "parity and cpu", "keyword": "", "args": ["suites"]}
        return made
    baseline = side("b.jsonl", [rec("parity/add/float32/forward"), rec("parity/mm/float32/forward")], "r1")
    candidate = side("c.jsonl", [rec("parity/add/float32/forward")], "r2")
    asked, outside = compare.within_selection(baseline, candidate)
    assert outside == 0
    assert [c.check for c in compare.compare(asked, candidate).of("disappeared")] == ["parity/mm/float32/forward"]
    candidate.headers["r2"]["selection"] = {"markexpr": "parity and cpu", "keyword": "add", "args": ["suites"]}
    assert compare.within_selection(baseline, candidate)[1] == 1   # another selection: mm was not asked for
    for side_ in (baseline, candidate):   # the same -k on both sides: mm, made by it, went
        next(iter(side_.headers.values()))["selection"]["keyword"] = "add"
    assert compare.within_selection(baseline, candidate)[1] == 0


def test_pytest_baseline_says_how_many_checks_were_outside_the_run(tmp_path):
    baseline = write_run(tmp_path / "kept.jsonl", [
        rec("env/tokenizers-native"), rec("parity/add/float32/forward"), rec("ops/add/float32")])
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/env", "-q", "-p", "no:cacheprovider",
                          "-k", "cpu-tokenizers-native", "--run-file", str(tmp_path / "run.jsonl"),
                          "--baseline", str(baseline)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert ("note: 2 check(s) of the baseline are outside this run's selection (its paths, -m and -k do not take "
            "them): not compared, and not counted as disappeared") in res.stdout
    assert "0 disappeared" in res.stdout
