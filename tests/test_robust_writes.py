"""Run files and baselines lose nothing (issue 26): an interrupted run leaves a baseline as it
was, a full disk stops the run with one line and no torn line in the file, a repeated header
drops no record, a file is never both the run file and a file the run replaces, and a FIFO,
an unreadable directory or a symbolic link loop is said as what it is instead of hanging or
being called missing. The end-to-end cases run a child pytest over a few synthetic checks."""
import errno
import json
import os

import pytest

from harness.core import runfiles
from harness.plugin import options
from tests.test_plugin import _env, run_pytest

QUICK = '''
import os
import pytest

@pytest.mark.parametrize("i", range(4))
def test_quick(target, i):
    # a check that raises KeyboardInterrupt stops the session as Ctrl-C does while it runs
    if os.environ.get("INTERRUPT_AT") == str(i):
        raise KeyboardInterrupt
    if os.environ.get("FAIL_AT") == str(i):
        pytest.fail("this one fails")
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "suites" / "env").mkdir(parents=True)
    (tmp_path / "suites" / "env" / "test_quick.py").write_text(QUICK)
    return tmp_path


def _record(run, check="env/a", status="pass"):
    suite, subject = check.split("/", 1)
    return {"kind": "check", "run": run, "check": check, "suite": suite, "subject": subject, "variant": "",
            "target": "cpu", "status": status, "category": "n/a", "metrics": {}, "reason": "", "duration_s": 0.0}


def _lines(*objs) -> bytes:
    return "".join(runfiles.encode_line(o) for o in objs).encode()


def _one_line(res, needle: str) -> str:
    """The output's single line holding ``needle`` (pytest may frame it with '!')."""
    said = [ln for ln in (res.stdout + res.stderr).splitlines() if needle in ln]
    assert len(said) == 1, res.stdout + res.stderr
    return said[0]


# --------------------------------------------------------------------------- 1. an interrupted --save-baseline

@pytest.mark.parametrize("how,env,args,says", [
    ("ctrl-c", {"INTERRUPT_AT": "2"}, [], "the run was interrupted after 2 of 4 checks"),
    ("-x", {"FAIL_AT": "1"}, ["-x"], "the run stopped after 2 of 4 checks"),
], ids=["ctrl-c", "exitfirst"])
def test_a_run_that_does_not_end_leaves_the_old_baseline_and_says_so(project, recorded, how, env, args, says):
    baseline = project / "B.jsonl"
    old = _lines(runfiles.header("old", "e", recorded("linux_x86_64")),
                 *(_record("old", f"env/c{i}") for i in range(6)), {"kind": "end", "run": "old", "exitstatus": 0})
    baseline.write_bytes(old)
    res = run_pytest(project, "--device", "cpu", "-p", "no:randomly", "--run-file", str(project / "r.jsonl"),
                     "--save-baseline", str(baseline), *args, env=_env(**env))
    assert res.returncode != 0, res.stdout + res.stderr
    assert baseline.read_bytes() == old
    line = _one_line(res, "baseline NOT replaced")
    assert says in line and "B.jsonl still holds its earlier run (6 checks)" in line, line
    assert "baseline kept" not in res.stdout and "INTERNALERROR" not in res.stdout + res.stderr


def test_an_interrupted_run_with_no_baseline_yet_writes_none_and_says_so(project):
    baseline = project / "B.jsonl"
    res = run_pytest(project, "--device", "cpu", "-p", "no:randomly", "--run-file", str(project / "r.jsonl"),
                     "--save-baseline", str(baseline), env=_env(INTERRUPT_AT="1"))
    assert res.returncode == 2 and not baseline.exists()
    line = _one_line(res, "baseline NOT written")
    assert "interrupted after 1 of 4 checks" in line and "no baseline was written to B.jsonl" in line, line


def test_a_run_that_ends_still_keeps_its_baseline(project, recorded):
    baseline = project / "B.jsonl"
    baseline.write_bytes(_lines(runfiles.header("old", "e", recorded("linux_x86_64")), _record("old"),
                                {"kind": "end", "run": "old", "exitstatus": 0}))
    res = run_pytest(project, "--device", "cpu", "--run-file", str(project / "r.jsonl"),
                     "--save-baseline", str(baseline))
    assert res.returncode == 0 and "baseline kept" in res.stdout, res.stdout + res.stderr
    assert len(runfiles.read_file(baseline).runs[0].records) == 4


# --------------------------------------------------------------------------- 2. a full disk

def test_a_full_disk_stops_the_run_with_one_line_and_no_traceback(project):
    res = run_pytest(project, "--device", "cpu", "-p", "no:randomly", "--run-file", "/dev/full")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "INTERNALERROR" not in out and "Traceback" not in out, out
    line = _one_line(res, "cannot write the run file /dev/full")
    assert "No space left on device" in line and "the run stopped after 1 check" in line, line
    assert "free some space or choose another place with --run-file PATH" in line
    assert "1 passed" in res.stdout   # the first check's end stopped the session: no other ran


def _half_then_enospc(monkeypatch, real_write=os.write):
    def write(fd, data):
        if os.fstat(fd).st_size > 0 and bytes(data).startswith(b'{"kind": "check"'):
            real_write(fd, bytes(data)[:len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)
    monkeypatch.setattr(runfiles.os, "write", write)


def test_a_write_that_fails_half_way_leaves_no_torn_line(tmp_path, recorded, monkeypatch):
    path = tmp_path / "r.jsonl"
    w = runfiles.Writer(path)
    w.write(runfiles.header("A", "e", recorded("linux_x86_64")))
    before = path.read_bytes()
    with monkeypatch.context() as m:
        _half_then_enospc(m)
        with pytest.raises(OSError) as info:
            w.write(_record("A", "env/a"))
    assert info.value.errno == errno.ENOSPC
    assert path.read_bytes() == before   # cut back to its last complete line
    w.write(_record("A", "env/b"))       # space again: the run file goes on cleanly
    w.close()
    rf = runfiles.read_file(path)
    assert rf.errors == [] and [r["check"] for r in rf.runs[0].records] == ["env/b"]


def _fails_with_eio(*args):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_torn_line_that_cannot_be_cut_back_does_not_swallow_the_next_line(tmp_path, recorded, monkeypatch):
    path = tmp_path / "r.jsonl"
    w = runfiles.Writer(path)
    w.write(runfiles.header("A", "e", recorded("linux_x86_64")))
    with monkeypatch.context() as m:
        _half_then_enospc(m)
        m.setattr(runfiles.os, "ftruncate", _fails_with_eio)
        with pytest.raises(OSError):
            w.write(_record("A", "env/a"))
    w.write(_record("A", "env/b"))
    w.close()
    rf = runfiles.read_file(path)
    # the torn half is said as what it is (a fragment a later line followed), not as a corrupt line
    assert len(rf.errors) == 1 and f"{path}:2: {runfiles.FRAGMENT}" in rf.errors[0], rf.errors
    assert [r["check"] for r in rf.runs[0].records] == ["env/b"]


def test_a_run_appended_after_a_torn_line_is_read_whole(tmp_path, recorded):
    path = tmp_path / "r.jsonl"
    torn = _lines(runfiles.header("old", "e", recorded("linux_x86_64")), _record("old", "env/a"))
    path.write_bytes(torn + runfiles.encode_line(_record("old", "env/b")).encode()[:30])
    w = runfiles.Writer(path)
    w.write(runfiles.header("new", "e", recorded("linux_x86_64")))
    for check in ("env/x", "env/y"):
        w.write(_record("new", check))
    w.write({"kind": "end", "run": "new", "exitstatus": 0})
    w.close()
    rf = runfiles.read_file(path)
    runs = {r.run_id: r for r in rf.runs}
    assert [r["check"] for r in runs["new"].records] == ["env/x", "env/y"] and runs["new"].complete
    assert [r["check"] for r in runs["old"].records] == ["env/a"]
    assert len(rf.errors) == 1 and f"{path}:3: {runfiles.FRAGMENT}" in rf.errors[0], rf.errors


# --------------------------------------------------------------------------- 7. a repeated header

@pytest.mark.parametrize("at_end", [False, True], ids=["mid-file", "at-the-end"])
def test_a_repeated_header_keeps_the_run_and_every_record(tmp_path, recorded, at_end):
    from harness.report import compare
    path = tmp_path / "r.jsonl"
    head = runfiles.header("A", "e", recorded("linux_x86_64"))
    lines = [head, _record("A", "env/a"), _record("A", "env/b")]
    lines += [head] if at_end else [head, _record("A", "env/c")]
    path.write_bytes(_lines(*lines))
    rf = runfiles.read_file(path)
    assert rf.errors == [f"{path}:{4}: repeated header for run 'A' (its first at line 1): ignored"]
    assert [r["check"] for r in rf.runs[0].records] == ["env/a", "env/b"] + ([] if at_end else ["env/c"])
    assert len(compare.side_from_runs("side", rf.runs, [str(path)]).records) == (2 if at_end else 3)


# --------------------------------------------------------------------------- 9. the same file twice

def test_save_baseline_naming_the_run_file_is_refused_before_anything_runs(project):
    run_file = project / "r.jsonl"
    run_file.write_bytes(before := b'{"kind": "header", "run": "earlier"}\n')
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file),
                     "--save-baseline", str(project / "sub" / ".." / "r.jsonl"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1, res.stderr
    assert "is also the run file this run appends to (--run-file)" in lines[0] and "its earlier runs" in lines[0]
    assert run_file.read_bytes() == before and "passed" not in res.stdout


def test_save_baseline_naming_the_default_run_file_is_refused(project):
    from harness.env import facts
    default = options.default_run_file(project, facts.env_id(facts.current()))
    res = run_pytest(project, "--device", "cpu", "--save-baseline", str(default))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1, res.stderr
    assert "is also the run file this run appends to by default" in lines[0], lines
    assert not default.exists()


class _Config:
    def __init__(self, rootpath, **opts):
        self.rootpath, self.opts = rootpath, opts

    def getoption(self, name):
        return self.opts.get(name.lstrip("-").replace("-", "_"))


def test_compare_out_over_the_run_file_or_the_baseline_is_refused_and_a_rolling_baseline_is_not(tmp_path):
    run_file, base = tmp_path / "r.jsonl", tmp_path / "b.jsonl"
    base.write_text("{}\n")
    clash = options.same_file_problems(_Config(tmp_path, run_file=str(run_file), baseline=str(base),
                                               compare_out=str(tmp_path / "r.md")), run_file)
    assert clash == [], clash   # r.md and r.json are not r.jsonl
    clash = options.same_file_problems(_Config(tmp_path, run_file=str(run_file), baseline=str(base),
                                               compare_out=str(base)), run_file)
    assert len(clash) == 1 and clash[0].startswith(f"--compare-out {base} is also the --baseline"), clash
    rolling = _Config(tmp_path, run_file=str(run_file), baseline=str(base), save_baseline=str(base))
    assert options.same_file_problems(rolling, run_file) == []


# --------------------------------------------------------------------------- 10. --device naming nothing

@pytest.mark.parametrize("value", [",", ", ,"])
def test_a_device_option_that_names_no_target_is_an_error(value):
    with pytest.raises(ValueError) as info:
        options.select_targets(value)
    assert str(info.value) == f"--device {value!r} names no target: cpu, cuda, mps, comma-separated, or all"


@pytest.mark.parametrize("args,says", [
    (["--device", ","], "--device ',' names no target"),
    (["--compare-out", "cmp.md"], "--compare-out needs --baseline: there is nothing to compare this run with"),
], ids=["device-comma", "compare-out-alone"])
def test_usage_errors_are_one_line_and_run_nothing(project, args, says):
    res = run_pytest(project, *args, "--run-file", str(project / "r.jsonl"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and says in lines[0], res.stdout + res.stderr
    assert not (project / "r.jsonl").exists()


# --------------------------------------------------------------------------- FIFOs, unreadable directories, loops

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)
def test_a_fifo_is_not_read_as_a_run_file(fifo, tmp_path):
    assert runfiles.find_run_files([str(fifo)]) == ([], [f"{fifo}: not a regular file (a FIFO); give a run file"])
    assert runfiles.read_file(fifo).errors == [f"{fifo}: not a regular file (a FIFO); give a run file"]
    files, problems = runfiles.find_run_files([str(tmp_path)])   # a directory holding one: the reader says it
    assert files == [str(fifo)] and runfiles.read_file(files[0]).errors[0].endswith("(a FIFO); give a run file")
    assert runfiles.probe_writable(fifo) == "not a regular file (a FIFO)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tool", ["report", "compare"])
def test_the_tools_refuse_a_fifo_in_one_line(fifo, tmp_path, tool, capsys):
    if tool == "report":
        from tools.report import main
        code = main([str(fifo), "--out", str(tmp_path / "out")])
    else:
        from tools.compare import main
        os.mkfifo(tmp_path / "other.jsonl")
        code = main([str(fifo), str(tmp_path / "other.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "not a regular file (a FIFO); give a run file" in err, err
    assert "Traceback" not in err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("option", ["--run-file", "--save-baseline"])
def test_a_fifo_as_an_output_is_refused_before_anything_runs(project, fifo, option):
    args = [option, str(fifo)] + (["--run-file", str(project / "r.jsonl")] if option != "--run-file" else [])
    res = run_pytest(project, "--device", "cpu", *args, timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1, res.stderr
    assert f"{option} {fifo}: cannot write there: not a regular file (a FIFO)" in lines[0]


def test_a_device_may_take_a_run_file_but_not_a_replaced_file():
    assert runfiles.probe_writable("/dev/null") is None
    assert runfiles.probe_writable("/dev/null", replace=True) == "not a regular file (a character device)"


def test_an_unreadable_directory_is_said_as_such(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text("{}\n")

    def refuse(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    monkeypatch.setattr(os, "scandir", refuse)   # as root, a mode cannot refuse it
    assert runfiles.find_run_files([str(tmp_path)]) == ([], [f"cannot read directory {tmp_path}: Permission denied"])


def test_a_symbolic_link_loop_is_said_as_such(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    os.symlink(b, a)
    os.symlink(a, b)
    assert runfiles.find_run_files([str(a)]) == ([], [f"{a}: symbolic link loop"])
    assert runfiles.read_file(a).errors == [f"{a}: cannot read: symbolic link loop"]
    assert runfiles.probe_writable(a) == "symbolic link loop"


def test_a_huge_value_quoted_in_a_problem_line_is_cut(tmp_path):
    """A run id or schema of any length (a megabyte) is quoted cut short: the problem stays a line."""
    path = tmp_path / "big.jsonl"
    huge = "r" * 1_000_000
    path.write_text(json.dumps({"kind": "check", "run": huge}) + "\n"
                    + json.dumps({"kind": "header", "run": "x", "schema": huge, "facts": {}}) + "\n")
    found = runfiles.read_file(path)
    assert len(found.errors) == 2 and all(len(e) < 300 for e in found.errors), [e[:300] for e in found.errors]
    assert "no readable header" in found.errors[0] and "schema version" in found.errors[1], found.errors


def test_a_run_file_named_twice_is_read_once(tmp_path):
    """By name twice, through its directory and by name, or by another spelling of the path."""
    run, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for f in (run, other):
        f.write_text('{"kind": "header", "run": "r"}\n')
    for paths, expected in (([run, run], [run]), ([tmp_path, run], [run, other]),
                            ([run, tmp_path / "." / "a.jsonl"], [run])):
        assert runfiles.find_run_files([str(p) for p in paths]) == ([str(f) for f in expected], []), paths


# --------------------------------------------------------------------------- a path named that holds something else

NOTES = b"# my notes\n\nkeep me\n"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("option, loses", [
    ("--run-file", "appending this run would mix its lines into it; give a new path or a run file (*.jsonl)"),
    ("--save-baseline", "replacing it would lose what it holds; give a new path or a run file (*.jsonl)"),
    ("--compare-out", "replacing it would lose what it holds; give a new path or an earlier comparison"),
], ids=["run-file", "save-baseline", "compare-out"])
def test_a_file_named_that_holds_something_else_is_refused_and_kept(project, recorded, option, loses):
    """`--run-file README.md` appended the run's records to README.md; `--save-baseline
    README.md` and `--compare-out README.md` replaced it with a baseline, a comparison."""
    notes = project / "README.md"
    notes.write_bytes(NOTES)
    baseline = project / "B.jsonl"
    baseline.write_bytes(_lines(runfiles.header("old", "e", recorded("linux_x86_64")), *(_record("old", f"env/c{i}")
                                                                                        for i in range(4))))
    extra = {"--run-file": [], "--save-baseline": ["--run-file", str(project / "r.jsonl")],
             "--compare-out": ["--run-file", str(project / "r.jsonl"), "--baseline", str(baseline)]}[option]
    res = run_pytest(project, "--device", "cpu", option, str(notes), *extra, timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1, res.stdout + res.stderr
    what = "an upgrade check's comparison" if option == "--compare-out" else "run records"
    assert lines[0] == (f"ERROR: {option} {notes}: it holds something other than {what} (it begins "
                        f"'# my notes'); {loses}"), lines[0]
    assert notes.read_bytes() == NOTES and not (project / "r.jsonl").exists()


@pytest.mark.timeout(180)
def test_the_files_a_run_wrote_are_taken_again(project, recorded):
    """What the refusal must not refuse: a run file, a baseline and a comparison written by
    earlier runs (and an empty file, or one being created) take the next run's."""
    run_file, baseline, out = project / "r.jsonl", project / "B.jsonl", project / "cmp.md"
    baseline.touch()
    for _ in range(2):
        res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), "--save-baseline", str(baseline),
                         timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), "--baseline", str(baseline),
                         "--compare-out", str(out), timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    kept = [runfiles.read_file(f) for f in (run_file, runfiles.archive_of(run_file))]   # older runs retired there
    assert sum(len(f.runs) for f in kept) == 4 and not any(f.errors for f in kept), [f.errors for f in kept]
    assert out.read_text().startswith("# Upgrade check")
    assert json.loads(out.with_suffix(".json").read_text())["compare_schema"]


@pytest.mark.parametrize("option", ["--run-file", "--save-baseline"])
def test_a_compressed_name_is_refused_as_a_run_file(project, option):
    """A run is written plain: `--run-file r.jsonl.gz` made a file no reader could open."""
    path = project / "r.jsonl.gz"
    res = run_pytest(project, "--device", "cpu", option, str(path),
                     *(["--run-file", str(project / "r.jsonl")] if option != "--run-file" else []), timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and f"{option} {path}: its name ends in .gz" in lines[0], lines
    assert "give a name ending in .jsonl" in lines[0] and not path.exists()


def test_a_run_file_is_told_from_other_files_by_its_first_line(tmp_path, recorded):
    head = runfiles.encode_line(runfiles.header("r", "e", recorded("linux_x86_64"))).encode()
    record = runfiles.encode_line(_record("r")).encode()
    ours = {"a header and a record": head + record, "blank lines first": b"\n\n" + head,
            "a header cut off while written": head[:40], "... and appended to since": head[:40] + b"\n" + record,
            "a header longer than what is read": head[:-2] + b" " * runfiles.HEAD_BYTES + b"}\n",
            "a record first (a file spliced)": record, "its keys in another order": b'{"run": "r", "kind": "end"}\n',
            "empty": b"", "only blank lines": b"\n \n"}
    other = {"text": NOTES, "JSON of another kind": b'{"a": 1}\n', "a JSON list": b"[1, 2]\n",
             "a word cut off": b"{kind", "a line of no kind": b'{"run": "r", "kind": "note"}\n'}
    for name, data in {**ours, **other}.items():
        path = tmp_path / "f.jsonl"
        path.write_bytes(data)
        why = runfiles.run_file_problem(path)
        assert (why is None) == (name in ours), (name, why)
    assert runfiles.run_file_problem(tmp_path / "absent.jsonl") is None
    assert runfiles.run_file_problem("/dev/null") is None   # not a regular file: probe_writable speaks of those
