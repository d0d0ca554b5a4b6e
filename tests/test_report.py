"""tools.report on good, malformed, truncated, empty, wrong-schema and hostile input."""
import json

import pytest

from harness import journal
from tools import report

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> | pipe & ünïcødé ' + "long " * 200


def write_run(path, facts, records, run="R1", complete=True, torch_v=None):
    if torch_v:
        facts = {**facts, "torch": {**facts["torch"], "version": torch_v}}
    w = journal.Writer(path)
    from harness.facts import env_id
    w.write(journal.header(run, env_id(facts), facts, targets={"cpu": {"selected": True, "available": True}},
                           mps_fallback={"setting": "on"}))
    for rec in records:
        w.write({"kind": "check", "run": run, "metrics": {}, "category": "n/a", "reason": "", "duration_s": 0.1,
                 "variant": "", **rec, "check": f"{rec['suite']}/{rec['subject']}"})
    if complete:
        w.write({"kind": "end", "run": run, "exitstatus": 0})
    w.close()
    return path


def rec(subject, status, target="cpu", suite="env", **kw):
    return {"suite": suite, "subject": subject, "status": status, "target": target, **kw}


@pytest.fixture
def two_versions(tmp_path, recorded):
    f = recorded("linux_x86_64")
    a = write_run(tmp_path / "a.jsonl", f, [rec("threads", "pass", metrics={"threads": 2}),
                                             rec("device-available", "skip", target="mps", reason=HOSTILE)],
                  torch_v="2.6.0")
    b = write_run(tmp_path / "b.jsonl", f, [rec("threads", "fail", reason="oversubscribed"),
                                             rec("op", "pass", suite="ops", category="cpu-fallback")],
                  run="R2", torch_v="2.15.0")
    return a, b


def test_two_torch_versions_give_two_columns_and_three_files(tmp_path, two_versions, capsys):
    out = tmp_path / "out"
    assert report.main([*map(str, two_versions), "--out", str(out)]) == 0
    doc = json.loads((out / "matrix.json").read_text())
    cpu_cols = [c["id"] for c in doc["columns"] if c["target"] == "cpu"]
    assert len(cpu_cols) == 2 and "torch2.6.0" in cpu_cols[0] and "torch2.15.0" in cpu_cols[1]  # version order
    assert doc["cells"]["env/threads"][cpu_cols[0]]["status"] == "pass"
    assert doc["cells"]["env/threads"][cpu_cols[1]]["status"] == "fail"
    assert doc["cells"]["ops/op"][cpu_cols[1]]["key"] == "cpu-fallback"
    md = (out / "matrix.md").read_text()
    assert "## env" in md and "## ops" in md and "oversubscribed" in md and "threads=2" in md
    assert "| pipe" not in md.replace("\\| pipe", "")  # a | in a reason cannot break the table
    assert (out / "matrix.html").read_text().startswith("<!DOCTYPE html>")


def test_hostile_strings_are_escaped_in_html(tmp_path, two_versions):
    out = tmp_path / "out"
    report.main([*map(str, two_versions), "--out", str(out)])
    page = (out / "matrix.html").read_text()
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "ünïcødé" in page


def test_malformed_file_is_named_with_its_line_and_the_rest_still_reported(tmp_path, two_versions, capsys):
    a, b = two_versions
    lines = b.read_text().splitlines()
    lines.insert(2, "{garbage")
    b.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert report.main([str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {b}:3: not valid JSON (JSONDecodeError)"]
    doc = json.loads((out / "matrix.json").read_text())
    assert {"env/threads", "env/device-available", "ops/op"} <= set(doc["cells"])  # both files' good records


def test_truncated_file_from_a_killed_run(tmp_path, two_versions, capsys):
    a, b = two_versions
    text = b.read_text()
    b.write_text(text[: text.rindex('{"kind": "end"') - 30])  # cut inside the last record
    out = tmp_path / "out"
    assert report.main([str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "truncated last line" in err and str(b) in err and len(err.splitlines()) == 1
    assert "no (cut off)" in (out / "matrix.md").read_text()


@pytest.mark.parametrize("content,says", [
    ("", "empty run file"),
    ('{"kind": "header", "schema": 99, "run": "x", "facts": {}}\n', "schema version 99"),
    ("\x00\x01binary\n", "not valid JSON"),
])
def test_unusable_input_exits_2_and_keeps_the_old_matrix(tmp_path, capsys, content, says):
    out = tmp_path / "out"
    out.mkdir()
    (out / "matrix.md").write_text("previous matrix")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert report.main([str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert (out / "matrix.md").read_text() == "previous matrix"


def test_missing_inputs(tmp_path, capsys):
    assert report.main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    empty_dir = tmp_path / "runs"
    empty_dir.mkdir()
    assert report.main([str(empty_dir), "--out", str(tmp_path)]) == 2
    assert "no run files" in capsys.readouterr().err


def test_the_newest_run_of_an_environment_wins(tmp_path, recorded):
    f = recorded("linux_x86_64")
    path = tmp_path / "r.jsonl"
    write_run(path, f, [rec("threads", "fail")], run="20260101T000000Z-a")
    write_run(path, f, [rec("threads", "pass")], run="20260102T000000Z-b")
    runs, _, errors = report.load([str(path)])
    m = report.build(runs)
    assert errors == [] and len(m.columns) == 1
    assert m.cells[("env/threads", m.columns[0].id)]["status"] == "pass"


def test_report_cli_runs_as_a_module(tmp_path, two_versions):
    import subprocess
    import sys
    from tests.conftest import ROOT
    res = subprocess.run([sys.executable, "-m", "tools.report", str(tmp_path / "nothing-here")],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_columns_that_would_share_a_label_are_told_apart(tmp_path, recorded):
    f = recorded("linux_x86_64")
    other_py = {**f, "python": {**f["python"], "version": "3.12.1"}}
    write_run(tmp_path / "a.jsonl", f, [rec("threads", "pass")])
    write_run(tmp_path / "b.jsonl", other_py, [rec("threads", "pass")], run="R2")
    runs, _, _ = report.load([str(tmp_path)])
    labels = [c.label for c in report.build(runs).columns]
    assert len(set(labels)) == 2 and any("py3.12.1" in label for label in labels)
