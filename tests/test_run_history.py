"""A run file used for years stays about one run of each suite long: at the end of a run, the
runs the report no longer shows anything of move to ``superseded/<name>.gz`` beside it
(harness.report.matrix.superseded chooses them, harness.core.runfiles.retire moves them).

What must hold: the matrix built from what stays is the matrix built from everything (every
cell, partial line and note but the count of retired checks); nothing a run wrote is lost (the
archive reads back whole); a file another run is still writing is left alone; a failure
halfway leaves the run file as it was."""
from __future__ import annotations

import errno
import gzip
import json

import pytest
from hypothesis import given, settings, strategies as st

from harness.core import runfiles
from harness.core.records import Status
from harness.report import verdict
from harness.report.matrix import build, superseded
from tests.test_plugin import SYNTHETIC, run_pytest

WHOLE = ("suites/",)


def run(run_id, started, targets=("cpu",), suites=("ops", "parity"), checks=("a", "b"), keyword="",
        complete=True, workload="", cpu="Xeon", failing=(), transformers="5.23.0"):
    """A run in memory: a record of each check of each suite on each target."""
    metrics = {"workload": workload} if workload else {}
    recs = [{"kind": "check", "run": run_id, "suite": s, "subject": c, "variant": "", "target": t,
             "check": f"{s}/{c}", "status": Status.FAIL if c in failing else Status.PASS, "category": "n/a",
             "reason": "", "metrics": dict(metrics), "duration_s": 0.1}
            for s in suites for t in targets for c in checks]
    header = {"kind": "header", "schema": 2, "run": run_id, "env_id": "vm-py3.11-torch2.15.0", "started": started,
              "facts": {"host": "vm", "cpu": {"model": cpu}, "packages": {"transformers": transformers}},
              "pytest_args": list(WHOLE),
              "selection": {"markexpr": "", "keyword": keyword, "args": list(WHOLE), "collected": len(recs) + 5,
                            "selected": len(recs), "deselected": 5 if keyword else 0},
              "targets": {t: {"selected": True, "available": True} for t in targets}}
    end = {"kind": "end", "run": run_id, "exitstatus": 0} if complete else None
    return runfiles.Run(run_id, header, "runs.jsonl", recs, end)


def kept(runs):
    gone = superseded(runs)
    return [r for r in runs if r.run_id not in gone]


def shown(runs) -> dict:
    """What the matrix shows of ``runs``, less what ``superseded`` may change: the runs each
    column merged, whether a merged run was cut off, and the note counting retired checks."""
    m = build(runs)
    return {"cells": m.cells, "rows": m.rows, "columns": [c.id for c in m.columns],
            "notes": [n for n in m.notes if "left out" not in n],
            "verdicts": [(v.title, v.partial, [(a.name, a.state, a.line) for a in v.aspects])
                         for v in verdict.verdicts(m)]}


# --------------------------------------------------------------------------- which runs

def ids(runs) -> set[str]:
    return superseded(runs)


def test_of_three_whole_runs_the_two_older_go():
    assert ids([run("A", "1"), run("B", "2"), run("C", "3")]) == {"A", "B"}


def test_a_narrowed_run_goes_once_a_whole_run_after_it_holds_its_checks():
    assert ids([run("K", "1", keyword="a", checks=("a",)), run("W", "2")]) == {"K"}


def test_a_whole_run_stays_beside_a_newer_narrowed_one():
    """The -k run replaces only its own checks: the whole run still shows the others."""
    assert ids([run("W", "1"), run("K", "2", keyword="a", checks=("a",))]) == set()


def test_a_narrowed_run_does_not_make_an_older_whole_one_go_even_when_it_holds_every_check():
    """The older whole run is the newest whole run of its suites: its list of checks decides
    which older records are of checks retired since, so it stays."""
    assert ids([run("W", "1"), run("K", "2", keyword="a or b")]) == set()


def test_another_target_workload_machine_or_transformers_replace_nothing():
    assert ids([run("M", "1", targets=("mps",)), run("C", "2", targets=("cpu",))]) == set()
    assert ids([run("S", "1", suites=("optim",), workload="small"),
                run("L", "2", suites=("optim",), workload="large")]) == set()
    assert ids([run("X", "1", cpu="Xeon"), run("E", "2", cpu="Epyc")]) == set()
    # the upgrade check's candidate: the same torch, another transformers, the same run file
    assert ids([run("V", "1"), run("C", "2", transformers="5.24.0")]) == set()


def test_a_run_that_recorded_nothing_goes():
    assert ids([run("N", "1", checks=()), run("W", "2")]) == {"N"}


def test_a_cut_off_run_goes_once_newer_runs_hold_its_checks_and_its_column_reads_whole_again():
    cut, whole = run("X", "1", complete=False), run("W", "2")
    assert ids([cut, whole]) == {"X"}
    assert [c.complete for c in build([cut, whole]).columns] == [False]
    assert [c.complete for c in build(kept([cut, whole])).columns] == [True]


def test_the_last_run_to_hold_a_check_retired_since_goes_and_only_the_note_counting_it_changes():
    older, newer = run("A", "1", checks=("a", "b", "retired")), run("B", "2", checks=("a", "b"))
    assert ids([older, newer]) == {"A"}
    assert any("left out" in n for n in build([older, newer]).notes)
    assert not any("left out" in n for n in build([newer]).notes)
    assert shown([older, newer]) == shown([newer])


def test_a_check_still_standing_keeps_its_run():
    """A check the newer whole run does not hold, with no whole run after it: it still shows."""
    older = run("A", "1", checks=("a", "b", "c"))
    narrowed = run("K", "2", keyword="a or b")
    assert ids([older, narrowed]) == set()


# --------------------------------------------------------------------------- what the matrix shows

RUN = st.fixed_dictionaries({
    "started": st.integers(0, 5).map(str),     # ties too: build orders them by run id
    "targets": st.sampled_from([("cpu",), ("mps",), ("cpu", "mps")]),
    "suites": st.sampled_from([("ops",), ("parity",), ("ops", "parity"), ("optim",)]),
    "checks": st.lists(st.sampled_from("abcd"), max_size=4, unique=True).map(tuple),
    "keyword": st.sampled_from(["", "", "a"]),
    "complete": st.booleans(),
    "workload": st.sampled_from(["", "small"]),
    "cpu": st.sampled_from(["Xeon", "Xeon", "Xeon", "Epyc"]),
    "transformers": st.sampled_from(["5.23.0", "5.23.0", "5.23.0", "5.24.0"]),
    "failing": st.lists(st.sampled_from("abcd"), max_size=2).map(tuple),
})


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN, min_size=1, max_size=7))
def test_leaving_the_superseded_runs_out_changes_nothing_the_matrix_shows(drawn):
    """Any history of runs, narrowed, cut off, on other targets, workloads, machines and
    transformers versions, with checks coming and going: the matrix of the runs kept is the matrix of them all."""
    runs = [run(f"r{i}", **kw) for i, kw in enumerate(drawn)]
    assert shown(kept(runs)) == shown(runs)


def test_the_whole_run_that_retired_a_check_stays_while_an_older_record_of_it_could_show():
    """The older run stays for its mps records; its cpu record of ``c`` is left out because
    the whole cpu run after it did not run ``c``. That run stays, though a narrowed run after
    it replaced every record it holds: without it, ``c`` would show again on cpu."""
    older = run("O", "1", targets=("cpu", "mps"), checks=("a", "b", "c"))
    whole, narrowed = run("W", "2", checks=("a", "b")), run("K", "3", keyword="a or b")
    assert ids([older, whole, narrowed]) == set()
    assert ("ops/c", "vm-py3.11-torch2.15.0/cpu") not in build([older, whole, narrowed]).cells
    assert shown(kept([older, whole, narrowed])) == shown([older, whole, narrowed])


@settings(max_examples=60, deadline=None)
@given(st.lists(RUN, min_size=1, max_size=5))
def test_retire_chooses_from_slim_records_what_it_would_from_whole_ones(drawn):
    """retire reads records slim (identity only: a gigabyte-old file must not be held whole);
    the choice is the one the whole records give."""
    import tempfile
    runs = [run(f"r{i}", **kw) for i, kw in enumerate(drawn)]
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/env.jsonl"
        write(path, runs)
        assert superseded(runfiles.read_file(path, slim=True).runs) == superseded(runfiles.read_file(path).runs)


def test_the_property_fails_on_a_choice_that_ignores_the_workload(monkeypatch):
    """The property above is not vacuous: a choice of runs that merges workloads (a run at
    the small workload standing for one at the large) changes the matrix, and it says so."""
    from harness.core import records as recs
    runs = [run("S", "1", suites=("optim",), workload="large", failing=("a",)),
            run("L", "2", suites=("optim",), workload="small")]
    monkeypatch.setattr(recs, "workload_of", lambda rec: "")
    wrong = superseded(runs)
    monkeypatch.undo()
    assert wrong == {"S"}
    assert shown([r for r in runs if r.run_id not in wrong]) != shown(runs)


# --------------------------------------------------------------------------- moving them: runfiles.retire

def write(path, runs, extra_lines=()):
    lines = []
    for r in runs:
        lines += [r.header, *r.records] + ([r.end] if r.end else [])
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(runfiles.encode_line(obj) for obj in lines)
        fh.writelines(extra_lines)


def test_retire_moves_the_chosen_runs_and_keeps_every_other_line_as_it_was(tmp_path):
    path = tmp_path / "env.jsonl"
    a, b, c = run("A", "1"), run("B", "2"), run("C", "3")
    write(path, [a, b, c], extra_lines=['{"not json\n'])
    before = path.read_bytes().splitlines(keepends=True)
    moved = runfiles.retire(path, superseded)
    assert (moved.runs, moved.records) == (2, len(a.records) + len(b.records))
    assert moved.archive == tmp_path / "superseded" / "env.jsonl.gz"
    after = path.read_bytes().splitlines(keepends=True)
    assert after == [line for line in before if b'"run": "A"' not in line and b'"run": "B"' not in line]
    assert moved.size_after == path.stat().st_size < moved.size_before
    back = runfiles.read_file(moved.archive)
    assert back.errors == [] and [r.run_id for r in back.runs] == ["A", "B"]
    assert [r.records for r in back.runs] == [a.records, b.records] and all(r.complete for r in back.runs)
    assert gzip.decompress(moved.archive.read_bytes()).splitlines(keepends=True) == [
        line for line in before if b'"run": "A"' in line or b'"run": "B"' in line]
    # a later retirement adds to the archive, which reads back every run it ever took
    write(path, [c, run("D", "4")])
    runfiles.retire(path, superseded)
    assert [r.run_id for r in runfiles.read_file(moved.archive).runs] == ["A", "B", "C"]
    assert [r.run_id for r in runfiles.read_file(path).runs] == ["D"]


def test_retire_with_nothing_to_move_leaves_the_file_and_makes_no_archive(tmp_path):
    path = tmp_path / "env.jsonl"
    write(path, [run("A", "1")])
    data = path.read_bytes()
    assert runfiles.retire(path, superseded) is None
    assert path.read_bytes() == data and not (tmp_path / "superseded").exists()


def test_a_file_a_run_is_still_writing_is_left_alone(tmp_path):
    path = tmp_path / "env.jsonl"
    write(path, [run("A", "1"), run("B", "2")])
    writer = runfiles.Writer(path)
    live = run("C", "3")
    writer.write(live.header)
    data = path.read_bytes()
    assert runfiles.retire(path, superseded) is None   # the writer's lock: not now
    assert path.read_bytes() == data
    for line in (*live.records, live.end):
        writer.write(line)
    writer.close()
    assert runfiles.retire(path, superseded).runs == 2
    assert [r.run_id for r in runfiles.read_file(path).runs] == ["C"]


def test_a_writer_that_opened_the_file_just_before_it_was_replaced_writes_to_the_new_one(tmp_path, monkeypatch):
    path = tmp_path / "env.jsonl"
    path.write_text("")
    real, done = runfiles.fcntl.flock, []

    def replaced_meanwhile(fd, op):   # retire's rename lands between the writer's open and its lock
        if not done:
            done.append(1)
            (tmp_path / "new").write_text("")
            (tmp_path / "new").replace(path)
        return real(fd, op)
    monkeypatch.setattr(runfiles.fcntl, "flock", replaced_meanwhile)
    writer = runfiles.Writer(path)
    writer.write(run("A", "1").header)
    writer.close()
    assert [r.run_id for r in runfiles.read_file(path).runs] == ["A"]


def test_a_full_disk_while_archiving_leaves_the_run_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "env.jsonl"
    write(path, [run("A", "1"), run("B", "2")])
    data = path.read_bytes()

    def full(archive, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(runfiles, "_append_whole", full)
    with pytest.raises(OSError):
        runfiles.retire(path, superseded)
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["env.jsonl", "superseded"]   # no temporaries


def test_an_archive_cut_short_reads_back_what_it_holds_and_says_where_it_stops(tmp_path):
    path = tmp_path / "env.jsonl"
    write(path, [run("A", "1"), run("B", "2")])
    moved = runfiles.retire(path, superseded)
    whole = moved.archive.read_bytes()
    moved.archive.write_bytes(whole + gzip.compress(b'{"kind": "header"}\n' * 200)[:40])
    rf = runfiles.read_file(moved.archive)
    assert [r.run_id for r in rf.runs] == ["A"]
    assert len(rf.errors) == 1 and "cannot read on: compressed data cut short or damaged" in rf.errors[0]


# --------------------------------------------------------------------------- at the end of a run, for real

def test_a_second_run_moves_the_first_out_and_says_so(tmp_path):
    (tmp_path / "suites" / "env").mkdir(parents=True)
    (tmp_path / "suites" / "env" / "test_synthetic.py").write_text(SYNTHETIC)
    run_file = tmp_path / "runs" / "env.jsonl"
    args = ("--device", "cpu", "--run-file", str(run_file), "-k", "passes or fails")
    first = run_pytest(tmp_path, *args)
    assert "moved to" not in first.stdout, first.stdout
    first_lines = run_file.read_bytes()
    second = run_pytest(tmp_path, *args)
    assert second.returncode == 1, second.stdout + second.stderr   # test_fails fails, as in the first run
    said = [line for line in second.stdout.splitlines() if "moved to" in line]
    assert len(said) == 1 and said[0].startswith("run file: 1 earlier run that the report no longer shows"), said
    assert "runs/superseded/env.jsonl.gz" in said[0] and "python -m tools.report" in said[0]
    archived = gzip.decompress((run_file.parent / "superseded" / "env.jsonl.gz").read_bytes())
    assert archived == first_lines
    now = runfiles.read_file(run_file)
    assert now.errors == [] and len(now.runs) == 1
    assert json.loads(archived.splitlines()[0])["run"] != now.runs[0].run_id


def test_the_report_reads_an_archive_or_its_folder_as_run_files(tmp_path):
    path = tmp_path / "runs" / "env.jsonl"
    path.parent.mkdir()
    write(path, [run("A", "1", failing=("a",)), run("B", "2")])
    moved = runfiles.retire(path, superseded)
    files, problems = runfiles.find_run_files([str(path.parent), str(moved.archive.parent)])
    assert problems == [] and files == [str(path), str(moved.archive)]   # reports/runs: not what is below it
    from tools import report
    out = tmp_path / "old"
    assert report.main([str(moved.archive.parent), "--out", str(out), "--no-baseline"]) == 0
    cells = json.loads((out / "matrix.json").read_text())
    assert "ops/a" in json.dumps(cells) and (out / "matrix.html").is_file()


def test_a_move_that_fails_is_one_line_of_the_summary_and_not_a_failure(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from harness.plugin import hooks

    def full(path, choose):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(runfiles, "retire", full)
    state = SimpleNamespace(writer=SimpleNamespace(path=tmp_path / "env.jsonl"), retired=None, retire_error=None)
    hooks.SessionState.retire_superseded(state)
    assert state.retired is None
    assert state.retire_error.startswith("earlier runs not moved to ") and "superseded/env.jsonl.gz" in state.retire_error
    assert state.retire_error.endswith("No space left on device; the run file keeps them, and the next run tries again")


def test_a_run_file_behind_a_symbolic_link_is_rewritten_where_it_lies(tmp_path):
    real = tmp_path / "synced" / "env.jsonl"
    real.parent.mkdir()
    write(real, [run("A", "1"), run("B", "2")])
    link = tmp_path / "env.jsonl"
    link.symlink_to(real)
    moved = runfiles.retire(link, superseded)
    assert link.is_symlink() and moved.archive == real.parent / "superseded" / "env.jsonl.gz"
    assert [r.run_id for r in runfiles.read_file(link).runs] == ["B"]


def test_an_archive_write_cut_short_is_undone_and_the_archive_still_reads_back(tmp_path, monkeypatch):
    """A disk that fills up halfway through the compressed member: the part written is cut
    off again, so the runs moved before still read back and the run file keeps its runs."""
    path = tmp_path / "env.jsonl"
    write(path, [run("A", "1"), run("B", "2")])
    first = runfiles.retire(path, superseded)
    archive_before = first.archive.read_bytes()
    write(path, [run("B", "2"), run("C", "3")])
    data = path.read_bytes()
    real_write = runfiles.os.write

    def half_then_full(fd, view):
        if runfiles.os.fstat(fd).st_ino == first.archive.stat().st_ino:
            real_write(fd, bytes(view[: len(view) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, view)
    monkeypatch.setattr(runfiles.os, "write", half_then_full)
    with pytest.raises(OSError):
        runfiles.retire(path, superseded)
    monkeypatch.undo()
    assert first.archive.read_bytes() == archive_before and path.read_bytes() == data
    assert [r.run_id for r in runfiles.read_file(first.archive).runs] == ["A"]
