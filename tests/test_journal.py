"""Journal units: check identity, outcome mapping, writing and reading run files."""
import json

import pytest

from harness.core import records, runfiles
from harness.plugin import record


class Case:
    subject, variant = "softmax", "float16/forward"


@pytest.mark.parametrize("parts,func,params,expected", [
    (("r", "suites", "env", "test_env.py"), "test_env_fit", {"target": "cpu", "case": Case()},
     ("env/softmax/float16/forward", "cpu")),
    (("r", "suites", "optim", "test_o.py"), "test_checkpointing_lowers_memory", {"target": "mps", "dtype": "fp16"},
     ("optim/checkpointing_lowers_memory/fp16", "mps")),
    (("r", "suites", "ops", "test_o.py"), "test_plain", {}, ("ops/plain", None)),
])
def test_identity_is_suite_subject_variant_without_target(parts, func, params, expected):
    ident = records.identity_for(parts, func, params)
    assert (ident.check, ident.target) == expected


def test_tests_outside_suites_are_not_checks():
    assert records.identity_for(("r", "tests", "test_x.py"), "test_x", {}) is None


def _ph(when, outcome, message="", wasxfail=None):
    return {"when": when, "outcome": outcome, "message": message, "wasxfail": wasxfail, "duration": 0.1}


@pytest.mark.parametrize("phases,status", [
    ([_ph("setup", "passed"), _ph("call", "passed"), _ph("teardown", "passed")], "pass"),
    ([_ph("setup", "passed"), _ph("call", "failed", "boom"), _ph("teardown", "passed")], "fail"),
    ([_ph("setup", "skipped", "absent"), _ph("teardown", "passed")], "skip"),
    ([_ph("setup", "failed", "fixture broke"), _ph("teardown", "passed")], "error"),
    ([_ph("setup", "passed"), _ph("call", "skipped", wasxfail="gap"), _ph("teardown", "passed")], "xfail"),
    ([_ph("setup", "passed"), _ph("call", "passed", wasxfail="gap"), _ph("teardown", "passed")], "xpass"),
    ([_ph("setup", "passed"), _ph("call", "passed"), _ph("teardown", "failed", "leak")], "error"),
    ([_ph("setup", "passed"), _ph("???", "failed", "worker 'gw0' crashed")], "crash"),
    ([_ph("setup", "passed"), _ph("call", "failed", "Timeout >5.0s"), _ph("teardown", "passed")], "timeout"),
])
def test_outcome_of_phases(phases, status):
    assert record.outcome_of(phases)[0] == status


def test_reason_is_one_bounded_line():
    status, reason = record.outcome_of([_ph("setup", "passed"), _ph("call", "failed", "x" * 5000 + "\nsecond")])
    assert status == "fail" and "\n" not in reason and len(reason) <= records.REASON_MAX


def _record(run, check="env/a", status="pass", target="cpu"):
    suite, subject = check.split("/", 1)
    return {"kind": "check", "run": run, "check": check, "suite": suite, "subject": subject, "variant": "",
            "target": target, "status": status, "category": "n/a", "metrics": {}, "reason": "", "duration_s": 0.0}


def test_writer_and_reader_round_trip_with_interleaved_runs(tmp_path, recorded):
    path = tmp_path / "r.jsonl"
    w = runfiles.Writer(path)
    facts = recorded("linux_x86_64")
    w.write(runfiles.header("A", "env1", facts))
    w.write(runfiles.header("B", "env1", facts))  # a second session appending at the same time
    w.write(_record("A", "env/a"))
    w.write(_record("B", "env/b", "fail"))
    w.write({"kind": "end", "run": "A", "exitstatus": 0})
    w.close()
    rf = runfiles.read_file(path)
    assert rf.errors == []
    runs = {r.run_id: r for r in rf.runs}
    assert [r["check"] for r in runs["A"].records] == ["env/a"] and runs["A"].complete
    assert [r["status"] for r in runs["B"].records] == ["fail"] and not runs["B"].complete


@pytest.mark.parametrize("bad,expect", [
    (b"{not json\n", "r.jsonl:3: not valid JSON"),
    (b'{"kind": "check", "run": "A"}\n', "r.jsonl:3: record lacks field"),
    (b'{"kind": "check", "run": "Z", "check": "x"}\n', "no readable header"),
    (b'[1, 2]\n', "not a run-file line"),
    (b'{"kind": "check", "run": "A", "check": "env/a", "suite": "env", "subject": "a", "variant": "", '
     b'"target": "cpu", "status": "exploded", "category": null, "metrics": {}, "reason": "", "duration_s": 0}\n',
     "unknown status"),
])
def test_bad_lines_are_reported_by_file_and_line_and_skipped(tmp_path, recorded, bad, expect):
    path = tmp_path / "r.jsonl"
    good = [json.dumps(runfiles.header("A", "e", recorded("linux_x86_64"))), json.dumps(_record("A", "env/a"))]
    path.write_bytes(("\n".join(good) + "\n").encode() + bad + (json.dumps(_record("A", "env/b")) + "\n").encode())
    rf = runfiles.read_file(path)
    assert len(rf.errors) == 1 and expect in rf.errors[0], rf.errors
    assert [r["check"] for r in rf.runs[0].records] == ["env/a", "env/b"]


def test_truncated_last_line_keeps_every_record_before_it(tmp_path, recorded):
    path = tmp_path / "r.jsonl"
    lines = [json.dumps(runfiles.header("A", "e", recorded("linux_x86_64"))), json.dumps(_record("A", "env/a"))]
    path.write_text("\n".join(lines) + "\n" + json.dumps(_record("A", "env/b"))[:40])
    rf = runfiles.read_file(path)
    assert rf.errors == [f"{path}:3: truncated last line (the run was cut off)"]
    assert [r["check"] for r in rf.runs[0].records] == ["env/a"]


def test_wrong_schema_and_empty_files(tmp_path, recorded):
    wrong = tmp_path / "w.jsonl"
    wrong.write_text(json.dumps({**runfiles.header("A", "e", recorded("linux_x86_64")), "schema": 99}) + "\n")
    assert "schema version 99" in runfiles.read_file(wrong).errors[0]
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    assert "empty run file" in runfiles.read_file(empty).errors[0]


def test_metrics_are_made_json_safe():
    import torch
    safe = records.json_safe({"err": float("nan"), "inf": float("inf"), "dtype": torch.float16,
                              "t": torch.tensor(0.5), "nested": {"xs": (1, 2.0)}})
    assert safe == {"err": "nan", "inf": "inf", "dtype": "torch.float16", "t": 0.5, "nested": {"xs": [1, 2.0]}}
    assert json.loads(json.dumps(safe, allow_nan=False)) == safe


def test_a_lone_surrogate_in_a_reason_is_written_as_the_replacement_character(tmp_path, recorded):
    """An exception message can hold one (a file name decoded with surrogateescape); UTF-8
    cannot, so the writer would crash the run's controller."""
    path = tmp_path / "r.jsonl"
    w = runfiles.Writer(path)
    w.write(runfiles.header("A", "env1", recorded("linux_x86_64")))
    w.write({**_record("A", "env/a", "fail"), "reason": "cannot open /data/caf\udce9.bin"})
    w.close()
    rf = runfiles.read_file(path)
    assert rf.errors == [] and rf.runs[0].records[0]["reason"] == "cannot open /data/caf\ufffd.bin"


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.md"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        runfiles.write_atomic(target, "new \ud800")  # text that cannot be encoded fails halfway
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.md"]
