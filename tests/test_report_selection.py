"""A column merges every run of an environment: a run that left checks out (-k, -m, a path, a
cut-off) makes the column partial only where no whole run beside it makes up for them
(harness.report.selection). A user who once ran `-k softmax` and then `./compat suites` must
not read "partial" on the first screen forever, and one who only ran `-k` must read it."""
from __future__ import annotations

import pytest

from harness.core import runfiles
from harness.core.records import Status
from harness.report import compare, selection, verdict
from harness.report.matrix import build

SUITES = ("env", "ops", "parity", "optim", "perf")


def run(run_id, started, targets=("cpu",), suites=SUITES, args=("suites/",), markexpr="", keyword="",
        deselected=0, complete=True, checks=("a", "b")):
    """A run in memory: a pass of each check in ``checks`` for each suite and target."""
    recs = [{"kind": "check", "run": run_id, "suite": s, "subject": c, "variant": "", "target": t,
             "check": f"{s}/{c}", "status": Status.PASS, "category": "n/a", "reason": "", "metrics": {},
             "duration_s": 0.1} for s in suites for t in targets for c in checks]
    header = {"kind": "header", "run": run_id, "env_id": "vm-py3.11-torch2.15.0", "started": started,
              "facts": {"host": "vm"}, "pytest_args": list(args),
              "selection": {"markexpr": markexpr, "keyword": keyword, "args": list(args),
                            "collected": len(recs) + deselected, "selected": len(recs), "deselected": deselected},
              "targets": {t: {"selected": True, "available": True} for t in targets}}
    return runfiles.Run(run_id, header, "runs.jsonl", recs, {"kind": "end", "run": run_id,
                                                              "exitstatus": 0} if complete else None)


def partial(*runs, target="cpu") -> str:
    found = [v for v in verdict.verdicts(build(list(runs))) if v.title.endswith(f"· {target}")]
    assert len(found) == 1, [v.title for v in verdict.verdicts(build(list(runs)))]
    return found[0].partial


def whole(run_id="W", started="2026-11-25T10:00", **kw):
    return run(run_id, started, **kw)


def test_a_narrowed_run_alone_makes_the_column_partial_and_says_how():
    assert partial(run("K", "2026-11-25T09:00", keyword="softmax", suites=("parity",), deselected=90)).startswith(
        'partial: ran -k "softmax" (2 of 92 collected); not run here: env, ops, optim, perf')


@pytest.mark.parametrize("order", ["narrowed first", "narrowed last"])
def test_a_whole_run_beside_a_narrowed_one_makes_up_for_it(order):
    narrowed = run("K", "2026-11-25T09:00" if order == "narrowed first" else "2026-11-25T11:00",
                   keyword="softmax", suites=("parity",), deselected=90, checks=("a",))
    assert partial(narrowed, whole()) == ""


def test_a_whole_run_of_other_suites_does_not_make_up_for_a_narrowed_one():
    narrowed = run("K", "2026-11-25T09:00", keyword="softmax", suites=("parity",), deselected=90)
    others = whole(suites=("env", "ops", "optim", "perf"), args=("suites/", "-p", "tools.suiteplan"))
    assert partial(narrowed, others) == 'partial: ran -k "softmax" (2 of 92 collected)'


def test_a_whole_run_on_another_target_does_not_make_up_for_a_narrowed_one():
    narrowed = run("K", "2026-11-25T09:00", keyword="softmax", deselected=90)
    assert 'ran -k "softmax"' in partial(narrowed, whole(targets=("mps",)), target="cpu")


def test_a_run_whose_records_all_stand_no_more_says_nothing():
    older = run("K", "2026-11-25T09:00", keyword="softmax", suites=("parity",), deselected=90, checks=("a",))
    newer = run("K2", "2026-11-25T11:00", keyword="softmax or log_softmax", suites=("parity",), deselected=80)
    note = partial(older, newer)
    assert '-k "softmax or log_softmax"' in note and '-k "softmax" ' not in note


@pytest.mark.parametrize("markexpr,on,whole_for_parity", [
    ("parity and cpu", "cpu", False),            # leaves the compile family out (opt-in)
    ("parity and cpu or compile", "cpu", True),
    ("compile or parity", "cpu", True),
    ("not compile", "cpu", False),
    ("mps", "mps", False),                        # `pytest suites/ -m mps`: every suite but parity's compile family
    ("mps or compile", "mps", True),
    ("parity and not slow", "cpu", False),        # narrowed by a marker other than suite and target
    ("compile or (parity and (slow or not fast))", "cpu", False),   # every setting of slow and fast is weighed
    ("compile or (parity and (slow or not slow))", "cpu", True),
    ("parity and mps", "cpu", False),             # the other target: nothing of cpu
    ("optim and cpu", "cpu", False),
    ("(", "cpu", False),                          # unreadable: never read as whole
])
def test_a_marker_expression_is_whole_for_a_suite_only_when_it_selects_every_check_of_it(
        markexpr, on, whole_for_parity):
    assert selection.whole_for({"markexpr": markexpr}, "parity", on) is whole_for_parity


@pytest.mark.parametrize("markexpr,suite,on,expected", [
    ("mps", "ops", "mps", True), ("optim and cpu", "optim", "cpu", True), ("optim and cpu", "optim", "mps", False),
    ("ops", "ops", "standin-mps", True),          # a stand-in carries no target marker
    ("cpu", "ops", "standin-mps", False),
    ("not slow", "ops", "cpu", False),
])
def test_a_marker_expression_on_suites_without_opt_in_checks(markexpr, suite, on, expected):
    assert selection.whole_for({"markexpr": markexpr}, suite, on) is expected


def test_pytest_suites_dash_m_mps_on_a_mac_reads_partial_only_for_the_compile_family():
    mac = run("M", "2026-11-25T09:00", targets=("mps",), markexpr="mps", deselected=50)
    assert partial(mac, target="mps") == 'partial: ran -m "mps" (10 of 60 collected)'
    mac_and_compile = run("C", "2026-11-25T10:00", targets=("mps",), suites=("parity",), markexpr="compile and mps",
                          deselected=95)
    # the compile family's own run makes up for it only with a whole parity run beside: still partial
    assert partial(mac, mac_and_compile, target="mps").startswith("partial: ran ")
    assert partial(mac, whole(targets=("mps",)), target="mps") == ""


@pytest.mark.parametrize("args,suite,expected", [
    (("suites/",), "ops", True), (("suites/ops",), "ops", True), (("/home/u/mps-compat/suites/ops/",), "ops", True),
    (("suites/ops",), "parity", False), ((), "ops", True), ((".",), "ops", True),
    (("suites/parity/test_op_parity.py",), "parity", False),
    (("suites/parity/test_op_parity.py::test_op_parity[cpu-abs-float32-forward]",), "parity", False),
    (("suites/parity", "suites/parity/test_op_parity.py"), "parity", True),
    (("suites/", "-p", "tests.standins", "--device", "standin-mps"), "ops", True),
])
def test_paths_select_a_whole_suite_only_at_its_folder_or_above(args, suite, expected):
    assert selection.whole_for({"args": list(args)}, suite, "cpu") is expected


def test_a_path_narrower_than_its_suite_is_named_in_the_note():
    only_file = run("P", "2026-11-25T09:00", suites=("parity",), args=("suites/parity/test_op_parity.py",))
    assert partial(only_file).startswith("partial: ran suites/parity/test_op_parity.py (2 of 2 collected)")


def test_deselected_checks_without_m_or_k_narrow_the_run():   # --deselect, --lf
    assert not selection.whole_for({"args": ["suites/"], "deselected": 3}, "ops", "cpu")
    assert partial(run("D", "2026-11-25T09:00", deselected=3)).startswith("partial: ran a selection (10 of 13")


@pytest.mark.parametrize("order", ["cut first", "cut last"])
def test_a_cut_off_run_beside_a_whole_finished_one_leaves_nothing_missing(order):
    cut = run("X", "2026-11-25T09:00" if order == "cut first" else "2026-11-25T11:00", complete=False,
              checks=("a",))
    assert partial(cut, whole()) == ""


def test_a_cut_off_run_alone_is_said_and_cannot_make_up_for_another():
    cut = run("X", "2026-11-25T09:00", complete=False)
    assert "a run was cut off or interrupted before its end" in partial(cut)
    narrowed = run("K", "2026-11-25T11:00", keyword="softmax", suites=("parity",), deselected=90, checks=("a",))
    note = partial(cut, narrowed)
    assert "a run was cut off" in note and 'ran -k "softmax"' in note


def test_a_whole_run_that_left_a_suite_out_does_not_make_up_for_it():
    # ./compat suites runs each suite as its own pytest (tools.suiteplan --only-suites): a run whole by its
    # selection covers only the suites it has records of
    narrowed = run("K", "2026-11-25T09:00", keyword="adamw", suites=("optim",), deselected=90)
    env_only = whole(suites=("env", "ops", "parity"), args=("suites/", "-p", "tools.suiteplan", "--only-suites",
                                                            "env,ops,parity"))
    assert 'ran -k "adamw"' in partial(narrowed, env_only)


def test_the_compare_side_is_cut_off_only_where_nothing_makes_up_for_it():
    cut = run("X", "2026-11-25T09:00", complete=False, checks=("a",))
    assert compare.side_from_runs("candidate", [cut, whole()], []).complete
    assert not compare.side_from_runs("candidate", [cut], []).complete
    last_cut = run("X", "2026-11-25T11:00", complete=False, checks=("a",))
    assert not compare.side_from_runs("candidate", [whole(), last_cut], [], latest=True).complete


def test_a_compare_side_is_made_up_for_per_target():   # a side holds every target's records together
    cut = run("X", "2026-11-25T09:00", complete=False, targets=("cpu",))
    assert not compare.side_from_runs("candidate", [cut, whole(targets=("mps",))], []).complete
    assert compare.side_from_runs("candidate", [cut, whole(targets=("mps", "cpu"))], []).complete


def test_the_opt_in_markers_live_only_in_the_suites_records_names():
    """records.OPT_IN is what the report reads a -m run by: each opt-in marker must be used in the
    suites it names and in no other (else a -m run would read as whole where it left checks out)."""
    import re
    from pathlib import Path

    from harness.core import records
    root = Path(__file__).resolve().parents[1] / "suites"
    for marker, suites in records.OPT_IN.items():
        users = {p.relative_to(root).parts[0] for p in root.rglob("*.py")
                 if re.search(rf"\bmark\.{marker}\b", p.read_text(encoding="utf-8"))}
        assert users == set(suites), (marker, users)


def test_a_run_stopped_by_x_or_maxfail_is_not_complete():
    """pytest -x ends well (exit status 1, an end line) with the checks it had not reached
    missing: the end line's counts of the tests that ended and of those selected tell."""
    stopped = run("S", "2026-11-25T09:00")
    stopped.end.update(exitstatus=1, reached=4, selected=10)
    assert not stopped.complete
    assert "a run was cut off or interrupted before its end" in partial(stopped)
    assert partial(stopped, whole()) == ""                       # a whole run beside it makes up for it
    reached = run("R", "2026-11-25T09:00")
    reached.end.update(exitstatus=1, reached=10, selected=10)
    assert reached.complete                                      # failures, every check reached
    assert run("O", "2026-11-25T09:00").complete                 # no counts written: the end line's word


def test_a_suite_measured_at_a_workload_is_whole_by_its_target_marker():
    """The optim suite's records carry their workload (metrics.workload): the column and compare
    key them "cuda [large workload]", but -m "optim and cuda" selected them by the target."""
    optim = run("O", "2026-11-25T09:00", targets=("cuda",), suites=("optim",), markexpr="optim and cuda",
                deselected=500)
    for rec in optim.records[:1]:
        rec["metrics"] = {"workload": "large"}
    assert partial(optim, target="cuda") == "partial: not run here: env, ops, parity, perf"


def test_the_recorded_h100_column_names_what_it_left_out_and_nothing_it_did_not():
    """Real hardware output (tests/fixtures/recorded/h100-torch2.11-2026-11-24): parity and perf
    ran with -k "not minilm" and the optim runs were stopped by their time limit; -m "optim and
    cuda" itself selected the whole optim suite on cuda and is not named."""
    from tests.conftest import recorded_h100_controls
    folder = recorded_h100_controls()
    runs = [r for f in sorted(folder.glob("*.jsonl")) for r in runfiles.read_file(f).runs]
    note = [v for v in verdict.verdicts(build(runs)) if v.title.endswith("· cuda")][0].partial
    assert '-m "parity and cuda" -k "not minilm"' in note and '-m "perf and cuda" -k "not minilm"' in note
    assert "a run was cut off or interrupted before its end" in note
    assert '-m "optim and cuda"' not in note and "not run here" not in note   # every suite ran on cuda


# ----------------------------------------------------------------------------- checks a newer whole run no longer has

def cells_of(*runs) -> tuple[dict, list[str]]:
    m = build(list(runs))
    return {(check, col.split("/", 1)[1]): rec["status"] for (check, col), rec in m.cells.items()}, m.notes


def failing_b(run_id="OLD", started="2026-11-25T08:00", **kw):
    old = run(run_id, started, suites=("ops",), **kw)
    for rec in old.records:
        if rec["subject"] == "b":
            rec["status"] = Status.FAIL
    return old


def test_a_check_the_newest_whole_run_no_longer_has_leaves_the_column():
    newer = run("NEW", "2026-11-25T09:00", suites=("ops",), checks=("a",))
    cells, notes = cells_of(failing_b(), newer)
    assert ("ops/b", "cpu") not in cells and cells[("ops/a", "cpu")] == Status.PASS
    assert notes == ["1 record left out: the newest whole run of their suite on that target did not run those "
                     "checks (retired or renamed since, or no longer collected there); the run files keep them (ops/b)"]


@pytest.mark.parametrize("newer", [
    dict(keyword="a", deselected=1),                  # narrowed: it says nothing of b
    dict(complete=False),                             # cut off before b
    dict(suites=("parity",), checks=("a", "b")),      # another suite
    dict(targets=("mps",)),                           # another target: another column
], ids=["narrowed", "cut-off", "other-suite", "other-target"])
def test_a_check_stays_where_no_newer_whole_run_of_its_suite_and_target_says_it_is_gone(newer):
    kw = {"suites": ("ops",), "checks": ("a",), **newer}
    cells, notes = cells_of(failing_b(), run("NEW", "2026-11-25T09:00", **kw))
    assert cells[("ops/b", "cpu")] == Status.FAIL and notes == []


def test_an_older_whole_run_does_not_retire_a_newer_runs_check():
    cells, _ = cells_of(run("OLD", "2026-11-25T08:00", suites=("ops",), checks=("a",)),
                        failing_b("NEW", "2026-11-25T09:00", keyword="b", deselected=1))
    assert cells[("ops/b", "cpu")] == Status.FAIL


def test_a_workload_column_is_retired_only_by_a_run_at_its_workload():
    old = failing_b()
    for rec in old.records:
        rec["metrics"] = {"workload": "small"}
    large = run("NEW", "2026-11-25T09:00", suites=("ops", "perf"), checks=("a",))
    for rec in large.records:   # its ops checks at the large workload, a perf check at the small one
        rec["metrics"] = {"workload": "large" if rec["suite"] == "ops" else "small"}
    cells, notes = cells_of(old, large)
    assert cells[("ops/b", "cpu/small")] == Status.FAIL and notes == []


def test_a_run_file_with_a_malformed_selection_or_end_count_is_one_line_and_exit_2(tmp_path, capsys):
    """A header whose selection.args holds numbers, an unreadable -m, an end line counting in
    words: said in one line, exit 2, the matrix still written from what could be read."""
    import json

    from tools import report
    bad = tmp_path / "bad.jsonl"
    lines = [{"kind": "header", "schema": 2, "run": "B1", "env_id": "e", "started": "2026-11-25T00:00:00Z",
              "facts": {"host": "h"}, "selection": {"markexpr": "ops and (", "keyword": "", "args": [1, None],
                                                    "selected": 1, "collected": 1, "deselected": 0}},
             {"kind": "check", "run": "B1", "check": "ops/a", "suite": "ops", "subject": "a", "variant": "",
              "target": "cpu", "status": "pass", "category": "native", "reason": "", "metrics": {}, "duration_s": 0.1},
             {"kind": "end", "run": "B1", "exitstatus": 0, "reached": "x", "selected": True}]
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert report.main([str(bad), "--out", str(tmp_path / "out"), "--no-baseline"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "selection.args[0] is a whole number, not text" in err[0], err
    assert (tmp_path / "out" / "matrix.json").is_file()
    assert selection.whole_for({"args": [1, None]}, "ops", "cpu")   # never read as a path
    assert runfiles.Run("B1", lines[0], "bad", [], lines[2]).complete  # counts that are no counts: the end line's word


def test_one_selection_over_the_runs_of_compat_suites_is_said_once_with_its_counts_summed():
    """`./compat suites -k controls` makes three runs (env, ops and parity; optim; perf): the
    card said 'ran -k "controls" (18 of 30,807 collected); -k "controls" (9 of 183 collected);
    -k "controls" (6 of 473 collected)'. Once, summed; the same run made again counts once."""
    parts = [run(f"P{i}", f"2026-11-25T0{i}:00", suites=suites, keyword="controls", deselected=extra)
             for i, (suites, extra) in enumerate([(("env", "ops", "parity"), 90), (("optim",), 40), (("perf",), 50)])]
    said = partial(*parts)
    assert said.startswith('partial: ran -k "controls" (10 of 190 collected in 3 runs)'), said
    again = run("P9", "2026-11-25T09:00", suites=("env", "ops", "parity"), keyword="controls", deselected=90)
    assert partial(parts[0], again).startswith('partial: ran -k "controls" (6 of 96 collected)'), partial(
        parts[0], again)
