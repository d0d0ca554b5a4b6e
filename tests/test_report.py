"""tools.report on good, malformed, truncated, empty, wrong-schema and hostile input."""
import json
import re

import pytest

from harness.core import records, runfiles
from harness.report.sections import SKIPPED_NAMED
from tests.conftest import recorded_h100, no_kernels
from tools import report

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> | pipe & ünïcødé ' + "long " * 200


def write_run(path, facts, records, run="R1", complete=True, torch_v=None):
    if torch_v:
        facts = {**facts, "torch": {**facts["torch"], "version": torch_v}}
    w = runfiles.Writer(path)
    from harness.env.facts import env_id
    w.write(runfiles.header(run, env_id(facts), facts, targets={"cpu": {"selected": True, "available": True}},
                           mps_fallback={"setting": "on"}))
    for rec in records:
        w.write({"kind": "check", "run": run, "metrics": {}, "category": "n/a", "reason": "", "duration_s": 0.1,
                 "variant": "", "check": f"{rec['suite']}/{rec['subject']}", **rec})
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
    assert page.count("<script") == 3  # the page's own: error trap, its data (JSON), its behaviour
    assert "<script>alert" not in page and "<img" not in page
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
    assert "a run was cut off" in (out / "matrix.md").read_text()


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


def _op_records(n, target="mps", disagree_every=0):
    out = []
    for i in range(n):
        r = rec(f"op{i:03d}", "pass", target=target, suite="ops", category="native",
                variant="float32/forward", metrics={"samples": 3, "fallback_ops": []})
        if i == 7:
            r.update(category="cpu-fallback", metrics={"samples": 3, "fallback_ops": ["aten::foo"]})
        if disagree_every and i % disagree_every == 0:
            r.update(status="xpass", metrics={"samples": 3, "fallback_ops": [], "pytorch_expects": "xfail",
                                              "disagreement": "unexpected pass"})
        out.append(r)
    return out


def test_a_large_suite_is_summarized_by_category_with_its_odd_rows(tmp_path, recorded):
    write_run(tmp_path / "a.jsonl", recorded("apple_silicon_native"), _op_records(400, disagree_every=100))
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    md = (out / "matrix.md").read_text()
    assert "## ops: 400 checks, by category" in md
    counts = md.split("## ops: 400 checks, by category")[1].split("###")[0]
    assert re.search(r"\|\s*native\s*\|\s*399\s*\|", counts) and re.search(r"\|\s*cpu-fallback\s*\|\s*1\s*\|", counts)
    odd = md.split("### ops: checks that did not simply pass somewhere")[1].split("##")[0]
    assert "ops/op007" in odd and "fallback: aten::foo" in odd and "ops/op001" not in odd
    disagreements = md.split("## Disagreements with PyTorch's own MPS expectations")[1].split("\n## ")[0]
    assert disagreements.count("unexpected pass") == 4  # op000, op100, op200, op300
    assert len(json.loads((out / "matrix.json").read_text())["cells"]) == 400  # json keeps every row


def test_model_section_shows_measured_fallbacks_and_predicted_gaps(tmp_path, recorded):
    records = [rec("model_step_runs_natively", "pass", target="mps", suite="ops", category="cpu-fallback",
                   variant="bert", metrics={"model": "bert", "ops": {"forward": 36, "backward": 21, "optimizer": 10},
                                            "fallback_ops": ["aten::nonzero"],
                                            "predicted_without_mps_kernel": ["aten::_foo"]})]
    write_run(tmp_path / "a.jsonl", recorded("apple_silicon_native"), records)
    out = tmp_path / "out"
    report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--kernels", no_kernels(tmp_path)])
    section = (out / "matrix.md").read_text().split("## Does this model run natively")[1].split("\n## ")[0]
    assert "| bert" in section and "36 / 21 / 10" in section and "aten::nonzero" in section
    assert "aten::\\_foo" in section   # Markdown for the text aten::_foo (harness/report/render.py)


def _known_bug_record(name, kind, target, judgement):
    return rec(name, judgement.status, target=target, suite="parity", variant=f"float32/{kind}",
               check=f"parity/{name}/float32/{kind}", category=judgement.category,
               metrics=records.json_safe(judgement.metrics),
               reason=judgement.message)


def test_the_known_bugs_section_says_which_column_has_which_bug_and_names_the_source(tmp_path, recorded,
                                                                                   monkeypatch):
    """From real judgements: the CPU without the bug, a stand-in reproducing two reports."""
    from harness.env import devices
    from harness.parity.known_bugs import check
    from tests import reported_bugs, standins  # noqa: F401  (registers the stand-ins)
    monkeypatch.setenv(reported_bugs.VAR, "matmul-3x3,conv1d-65537-channels,sum-rapid")
    monkeypatch.setattr(devices.stand_in("standin-known-bugs"), "calls", {})
    records = []
    for name in ("matmul-3x3", "conv1d-65537-channels", "sum-rapid", "argmax-dim1-10x2"):
        for target in ("cpu", "standin-known-bugs"):
            records.append(_known_bug_record(name, "known-bug", target, check.judge(
                check.run_case(name, target, "float32"))))
            records.append(_known_bug_record(name, "repeatable", target, check.judge_repeatability(
                check.run_repeatability(name, target, "float32"))))
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"), records)
    out = tmp_path / "out"
    report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--kernels", no_kernels(tmp_path)])
    md = (out / "matrix.md").read_text()
    section = md.split("## Known accelerator bugs: does this machine have them")[1].split("\n## ")[0]
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in section.splitlines()
            if line.startswith("| ") and "pytorch#" in line}
    has = {key: line.split("|")[6].strip() for key, line in rows.items()}
    cpu = next(k[2] for k in has if k[2].endswith(" cpu"))
    stand = next(k[2] for k in has if k[2].endswith("standin-known-bugs"))
    assert has[("matmul-3x3", "pytorch#85406", stand)] == "yes: wrong result"
    assert has[("conv1d-65537-channels", "pytorch#134416", stand)] == "yes: raises"
    assert has[("sum-rapid", "pytorch#178497", stand)] == "yes: wrong result (intermittent)"
    assert has[("argmax-dim1-10x2", "pytorch#92311", stand)] == "no"
    assert all(has[k] == "no" for k in has if k[2] == cpu)
    sources = section.split("### Known accelerator bugs: the sources")[1]
    assert "https://github.com/pytorch/pytorch/issues/85406" in sources and "3x3" in sources
    assert "https://github.com/pytorch/pytorch/issues/134416" in (out / "matrix.json").read_text()
    assert "Known accelerator bugs: does this machine have them" in (out / "matrix.html").read_text()


def test_predicted_section_diffs_saved_kernel_tables(tmp_path, two_versions):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    for version, ops in (("2.6.0", ["add.out", "mm.out", "old_op"]), ("2.14.1", ["add.out", "mm.out", "new_op"])):
        (kdir / f"{version}.json").write_text(json.dumps({"schema": 1, "torch_version": version, "source": "test",
                                                          "mps_ops": ops, "counts": {"entries": 10}, "caveat": "c"}))
    (kdir / "diff-2.6.0-2.14.1.json").write_text(json.dumps({"schema": 1, "gained": [], "lost": []}))  # ignored
    out = tmp_path / "out"
    assert report.main([*map(str, two_versions), "--out", str(out), "--kernels", str(kdir)]) == 0
    md = (out / "matrix.md").read_text()
    assert "torch 2.6.0 -> 2.14.1: 1 ops gain an MPS kernel, 1 lose one" in md
    assert "| gained   | new_op" in md and "| lost     | old_op" in md
    assert [p["torch_version"] for p in json.loads((out / "matrix.json").read_text())["predicted"]] == ["2.6.0", "2.14.1"]


def test_a_corrupt_kernel_table_is_one_line_and_the_matrix_still_written(tmp_path, two_versions, capsys):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "2.15.0.json").write_text("{not json")
    out = tmp_path / "out"
    assert report.main([*map(str, two_versions), "--out", str(out), "--kernels", str(kdir)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {kdir / '2.15.0.json'}: not a readable kernel "
                                                            "table (JSONDecodeError)"]
    assert (out / "matrix.md").exists()


def test_optimization_claims_and_the_seed_003_chart(tmp_path, recorded):
    rows = [{"row": name, "peak_bytes": peak, "step_s": step} for name, peak, step in
            (("baseline", 100, 1.0), ("gradient-accumulation", 50, 2.0), ("gradient-checkpointing", 48, 2.5),
             ("adafactor", 30, 2.4), ("freeze-backbone", 15, 1.2), ("shorter-max-length", 14, 1.0))]
    run = write_run(tmp_path / "o.jsonl", recorded("linux_x86_64"), [
        rec("adafactor", "pass", suite="optim", variant="memory", category="holds",
            metrics={"mem_ratio": 0.53, "ci_low": 0.53, "ci_high": 0.53, "bound": 0.94, "kind": "lower"}),
        rec("gradient-checkpointing", "xfail", suite="optim", variant="time", category="does-not-hold",
            metrics={"time_ratio": 1.68, "ci_low": 1.58, "ci_high": 1.79, "bound": 1.38, "kind": "not-higher"}),
        rec("fp16-autocast", "xfail", suite="optim", variant="memory", category="does-not-hold",
            metrics={"mem_ratio": 0.55, "ci_low": 0.55, "ci_high": 0.55, "bound": 0.9, "kind": "lower",
                     "ratio_category": "holds", "loss_a": 0.6931, "loss_b": "nan"}),
        rec("seed-path-renamed", "pass", suite="optim",
            metrics={"rows": rows, "workload": "small", "record_kind": "seed-003-path"})])
    out = tmp_path / "out"
    assert report.main([str(run), "--out", str(out)]) == 0
    md, page = (out / "matrix.md").read_text(), (out / "matrix.html").read_text()
    assert "| adafactor" in md and "does-not-hold" in md and "≠ time_ratio=1.68" in md
    # a ratio within its bound beside "does-not-hold" says why: the step's loss
    assert "does-not-hold: breaks training (its loss is not finite; the ratio alone: holds)" in md
    pngs = list(out.glob("seed003_*.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({pngs[0].name})" in md
    assert "data:image/png;base64," in page


def test_a_small_and_a_large_optimization_run_on_one_machine_keep_both(tmp_path, recorded):
    def claim(workload, ratio):
        return rec("tf32", "pass" if ratio < 0.9 else "xfail", suite="optim", variant="time",
                   category="holds" if ratio < 0.9 else "inconclusive",
                   metrics={"time_ratio": ratio, "ci_low": ratio, "ci_high": ratio, "bound": 0.9, "workload": workload})
    facts = recorded("linux_x86_64")
    small = write_run(tmp_path / "small.jsonl", facts, [rec("python_arch", "pass"), claim("small", 0.99)], run="R1")
    large = write_run(tmp_path / "large.jsonl", facts, [claim("large", 0.40)], run="R2")
    out = tmp_path / "out"
    assert report.main([str(small), str(large), "--out", str(out)]) == 0
    data = json.loads((out / "matrix.json").read_text())
    columns = {c["id"]: c for c in data["columns"]}
    assert sorted(c["workload"] for c in columns.values()) == ["", "large", "small"]
    ratios = {columns[col]["workload"]: cell["metrics"]["time_ratio"]
              for col, cell in data["cells"]["optim/tf32"].items()}
    assert ratios == {"small": 0.99, "large": 0.40}
    md = (out / "matrix.md").read_text()
    assert "cpu (small workload)" in md and "cpu (large workload)" in md
    assert "time_ratio=0.99" in md and "time_ratio=0.4" in md, "one workload's result overwrote the other's"


# --------------------------------------------------------------------------- bad input and output (issue 12)

def markdown_html(md: str) -> str:
    """Markdown as a CommonMark renderer with GFM tables draws it, raw HTML allowed (the worst case)."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)


def markdown_tables(md: str) -> int:
    return sum(1 for line in md.splitlines() if re.fullmatch(r"\|[-:|]+\|", line))


def test_markdown_escapes_cells_and_headers_so_the_text_stays_text(tmp_path, recorded):
    import html as html_
    f = {**recorded("linux_x86_64"), "host": "evil|host <b>bold</b> & co"}
    run = write_run(tmp_path / "a.jsonl", f, [rec("threads", "fail", reason=HOSTILE),
                                             rec("<script>alert(2)</script>", "pass", metrics={"x": "a\\|b"})])
    out = tmp_path / "out"
    assert report.main([str(run), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    md = (out / "matrix.md").read_text()
    assert "<script" not in md and "<img" not in md and "<b>" not in md
    page = markdown_html(md)
    assert page.count("<table>") == markdown_tables(md)  # a | in a header would make one a paragraph
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    text = html_.unescape(re.sub(r"<[^>]+>", "", page))
    assert HOSTILE.split(" long")[0] in text                  # the reason, every character, as text
    assert "evil|host <b>bold</b> & co" in text and "env/<script>alert(2)</script>" in text


def test_markdown_escape_itself():
    from harness.report.render import escape
    assert escape('a|b\nc\r\nd') == "a\\|b c d"
    assert escape("<img onerror=x> & 1 -> 2") == "&lt;img onerror=x> &amp; 1 -> 2"
    assert escape("> quote") == "&gt; quote"
    assert escape("x\\|y `z`") == "x\\\\\\|y \\`z\\`"   # a backslash cannot undo the pipe's escape
    assert escape("snake_case __dunder__ *star* [link](u) ~~s~~ $x$ [0.5, 0.9]") == \
        "snake_case \\_\\_dunder\\_\\_ \\*star\\* [link\\](u) \\~\\~s\\~\\~ \\$x\\$ [0.5, 0.9]"
    for raw in ("__init__ *x* [a](javascript:alert(1)) ![i](x.png) `<b>` ~~s~~ a\\|b &amp; <", "aten::_foo | x_y",
                "> a -> b", "[0.5, 0.9] <= 1"):
        row = f"| {escape(raw)} |\n|---|\n"
        assert markdown_html(row).split("<th>")[1].split("</th>")[0] == \
            raw.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _surrogate_run(tmp_path, recorded):
    """A run file whose check id, reason and host hold lone surrogates: valid JSON ("\\ud800"),
    but no character, so no UTF-8 text can hold them."""
    path = write_run(tmp_path / "s.jsonl", {**recorded("linux_x86_64"), "host": "hostSURROGATE"},
                     [rec("threadsSURROGATE", "fail", reason="badSURROGATE reason"), rec("ok", "pass")])
    path.write_text(path.read_text().replace("SURROGATE", "\\ud800"))
    return path


def test_a_lone_surrogate_is_read_as_a_replacement_character(tmp_path, recorded, capsys):
    run = _surrogate_run(tmp_path, recorded)
    out = tmp_path / "out"
    assert report.main([str(run), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    assert capsys.readouterr().err == ""
    md, doc = (out / "matrix.md").read_text(), json.loads((out / "matrix.json").read_text())
    assert "bad\ufffd reason" in md and "env/threads\ufffd" in doc["cells"]
    assert doc["columns"][0]["facts"]["host"] == "host\ufffd"


@pytest.fixture
def old_matrix(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("matrix.md", "matrix.html", "matrix.json"):
        (out / name).write_text(f"old {name}")
    return out


def assert_old_matrix_kept(out, *also):
    assert {p.name for p in out.iterdir()} == {"matrix.md", "matrix.html", "matrix.json", *also}  # no temporaries
    for name in ("matrix.md", "matrix.html", "matrix.json"):
        if name not in also:
            assert (out / name).read_text() == f"old {name}"


def test_a_failure_while_writing_keeps_every_old_file_and_no_temporary(tmp_path, two_versions, old_matrix, capsys):
    (old_matrix / "matrix.html").unlink()
    (old_matrix / "matrix.html").mkdir()        # matrix.md would be written before it, matrix.json after
    assert report.main([*map(str, two_versions), "--out", str(old_matrix)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(old_matrix / "matrix.html") in err and "directory" in err, err
    assert_old_matrix_kept(old_matrix, "matrix.html")


def test_a_disk_full_halfway_keeps_every_old_file_and_no_temporary(tmp_path, two_versions, old_matrix, capsys,
                                                                   monkeypatch):
    import errno
    import pathlib
    real_open = pathlib.Path.open

    def fill_up(self, mode="r", *args, **kwargs):   # matrix.md is written; the disk is full at matrix.html
        f = real_open(self, mode, *args, **kwargs)
        if self.name.startswith(".matrix.html") and "w" in mode:
            f.close()
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return f
    monkeypatch.setattr(pathlib.Path, "open", fill_up)
    assert report.main([*map(str, two_versions), "--out", str(old_matrix)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on device" in err and ".matrix.html.tmp" in err, err
    assert_old_matrix_kept(old_matrix)


def test_an_unexpected_error_is_one_line_exit_2_and_the_old_matrix_kept(tmp_path, two_versions, old_matrix, capsys,
                                                                        monkeypatch):
    def broken(*args):
        raise RuntimeError("boom\nsecond line")
    monkeypatch.setattr(report, "json_text", broken)   # after matrix.md and matrix.html are rendered
    monkeypatch.delenv("MPS_COMPAT_TRACEBACK", raising=False)
    assert report.main([*map(str, two_versions), "--out", str(old_matrix)]) == 2
    err = capsys.readouterr().err
    assert err == "error: internal error: RuntimeError: boom (MPS_COMPAT_TRACEBACK=1 shows the traceback)\n"
    assert_old_matrix_kept(old_matrix)
    monkeypatch.setenv("MPS_COMPAT_TRACEBACK", "1")
    assert report.main([*map(str, two_versions), "--out", str(old_matrix)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "second line" in err
    assert err.endswith("error: internal error: RuntimeError: boom (MPS_COMPAT_TRACEBACK=1 shows the traceback)\n")


@pytest.mark.parametrize("where", ["a file", "under a file", "a file as a parent"])
def test_an_out_that_cannot_be_a_directory_is_one_line_and_exit_2(tmp_path, two_versions, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me")
    out = {"a file": blocker, "under a file": blocker / "sub", "a file as a parent": blocker / "a" / "b"}[where]
    assert report.main([*map(str, two_versions), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: cannot write the matrix to {out}: ") and \
        "not a directory" in err.lower(), err
    assert blocker.read_text() == "keep me" and list(tmp_path.glob("**/.*tmp*")) == []


def test_a_usage_error_is_one_line():
    res = _run_module("tools.report", "--no-such-option")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def _run_module(module, *args, stdout=None):
    """Run ``python -m module``; ``stdout="closed"``: into a pipe whose reader has already left."""
    import os
    import subprocess
    import sys
    from tests.conftest import ROOT
    if stdout != "closed":
        return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, stdout=write_end,
                              stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)


def test_a_reader_that_left_changes_nothing(tmp_path, two_versions):
    out = tmp_path / "out"
    res = _run_module("tools.report", *map(str, two_versions), "--out", str(out), stdout="closed")  # | head -0
    assert (res.returncode, res.stderr) == (0, "")
    assert {"matrix.md", "matrix.html", "matrix.json"} <= {p.name for p in out.iterdir()}
    bad = tmp_path / "bad.jsonl"
    text = two_versions[0].read_text()
    bad.write_text(text + "{garbage\n")
    res = _run_module("tools.report", str(bad), "--out", str(out), stdout="closed")
    where = f"{bad}:{text.count(chr(10)) + 1}"
    assert (res.returncode, res.stderr) == (2, f"error: {where}: not valid JSON (JSONDecodeError)\n")


RECORDED_H100 = recorded_h100()   # real hardware, kept in tests/fixtures/recorded


def test_the_recorded_h100_small_and_large_optimization_runs_stay_apart():
    """On the H100 the small and the large workload ran on one machine; the old matrix let the
    newer overwrite the older in one column (fp16 1.24x small, 0.41x large). Read as recorded."""
    from harness.report import compare, matrix
    runs = [run for name in ("optim-small.jsonl", "optim-large-partial.jsonl")
            for run in runfiles.read_file(RECORDED_H100 / name).runs]
    m = matrix.build(runs)
    optim = {c.id: c for c in m.columns if c.target == "cuda" and c.workload}
    assert sorted(c.workload for c in optim.values()) == ["large", "small"]
    both = [check for check in m.suites["optim"]
            if all((check, col) in m.cells for col in optim)]
    assert both, "no claim measured at both workloads"
    for check in both:
        cells = [m.cells[(check, col)] for col in optim]
        assert {c["metrics"]["workload"] for c in cells} == {"small", "large"}
    side = compare.side_from_runs("recorded", runs, [])
    assert {t for (check, t) in side.records if check in both} == {"cuda [small workload]", "cuda [large workload]"}


def test_the_page_opens_on_one_verdict_per_column(tmp_path, recorded):
    """The verdicts first: per column, the environment, the ops, what fails and why, before the
    environments and the matrix; then every failure, grouped by cause."""
    records = [rec("threads", "fail", reason="oversubscribed"),
               rec("softmax", "crash", suite="ops", category="crash", reason="SIGSEGV"),
               rec("erf", "xpass", suite="ops", category="native"),
               rec("ok", "pass")]
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"), records)
    out = tmp_path / "out"
    report.main([str(tmp_path / "a.jsonl"), "--out", str(out)])
    md = (out / "matrix.md").read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings[0] == "Verdict per machine" and headings.index("Environments") > headings.index("Failures by cause")
    first = md.split("## Verdict per machine")[1].split("\n## ")[0]
    assert "not fit for cpu: oversubscribed" in first and "crashed" not in first.split("environment")[0]
    assert "1 fails or errors" in first and "1 fall back" not in first  # one op check: the verb agrees
    # the state leads each line, as the page's badge does: "`XX` fit; ..." was read as "not fit"
    assert "`XX` bad (not fit" in first and "`--` not run here" in first
    cards = [x for x in first.splitlines() if x.startswith("- ")]
    assert cards and all(re.match(r"- `(OK|!!|XX|--)` \*\*", x) for x in cards), cards
    assert not [x for x in first.splitlines() if x.startswith("| `")]   # one column: no table at a glance
    aspects = [x for x in first.splitlines() if x.startswith("  - ") and x.lstrip("- ").startswith("`")]
    assert any(x.startswith("  - `XX` environment: not fit for cpu") for x in aspects), aspects
    failures = md.split("## Every failure, by cause and family")[1].split("\n## ")[0]
    assert "env/threads" in failures and "ops/softmax" in failures and "ops/erf" in failures
    assert "env/ok" not in failures
    html = (out / "matrix.html").read_text()
    assert html.index("Verdict per machine") < html.index("Environments")


def test_every_column_at_a_glance_before_the_lists(two_versions, tmp_path):
    """Seven machines made seven lists, and a terminal or a Markdown viewer's first screen held
    two. With more than one column, a table comes first: a row per column with its state, its
    name and its headline, as its list says them."""
    out = tmp_path / "out"
    report.main([str(p) for p in two_versions] + ["--out", str(out)])
    first = (out / "matrix.md").read_text().split("## Verdict per machine")[1].split("\n## ")[0]
    cards = [x for x in first.splitlines() if x.startswith("- ")]
    glance = [x for x in first.splitlines() if x.startswith("| `")]
    assert len(glance) == len(cards) > 1 and first.index(glance[-1]) < first.index(cards[0])
    for row, card in zip(glance, cards):
        state, title, headline = (x.strip() for x in re.split(r"(?<!\\)\|", row.strip()[1:-1]))   # an escaped pipe is text
        assert card.startswith(f"- {state} **{title}** (") and card.endswith(f": {headline}"), (row, card)
    assert any("torch 2.6.0" in g for g in glance) and any("torch 2.15.0" in g and "`XX`" in g for g in glance)


def test_the_failures_table_counts_each_kind_apart_and_lists_the_claims_that_do_not_hold(tmp_path, recorded):
    """The fleet's page said "Every failure, by cause and family (150)" of 53 failures and 97
    unexpected passes, and its intro promised the claims that do not hold, which the table never
    listed (21 on that page). The title counts each kind apart, and the claims are listed after
    the failures, the unsupported ops and the unexpected passes, as the intro says."""
    records = [rec("softmax", "fail", suite="ops", category="error", reason="error: RuntimeError: boom"),
               rec("erf", "xpass", suite="ops", category="native"),
               rec("lgamma", "xpass", suite="ops", category="native"),
               rec("ndtri", "fail", suite="ops", category="unsupported", reason="NotImplementedError: no kernel"),
               rec("freeze-backbone", "xfail", suite="optim", category="does-not-hold", variant="time",
                   check="optim/freeze-backbone/time", reason="x0.81, documented x0.26",
                   metrics={"time_ratio": 0.81, "claimed_ratio": 0.26}),
               rec("ok", "pass")]
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"), records)
    out = tmp_path / "out"
    report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--no-baseline"])
    md = (out / "matrix.md").read_text()
    title = ("Every failure, by cause and family (1 failure, 2 unexpected passes, 1 unsupported op, 1 claim that does "
             "not hold)")
    assert f"## {title}" in md
    table = md.split(f"## {title}")[1].split("\n## ")[0]
    order = ["ops/softmax", "ops/ndtri", "ops/erf", "ops/lgamma", "optim/freeze-backbone/time"]
    assert all(check in table for check in order) and sorted(order, key=table.index) == order, table
    assert title in (out / "matrix.html").read_text()


def test_a_nan_where_float64_has_a_number_heads_the_worst_parity_checks_and_breaks_no_margin_summary(tmp_path,
                                                                                                     recorded):
    """A non-finite failure's margin is infinite, spelled "inf" in the run file: it is the
    worst of its dtype, shown as NaN/inf, not dropped as a margin that is not a number. An
    infinite margin for another cause says that cause, not NaN (a compiled gradient where
    eager has none has no NaN in it); one that names no cause is plain inf."""
    def parity(subject, status, margin, variant="float16/forward", **met):
        return rec(subject, status, suite="parity", category="parity", variant=variant,
                   metrics={"margin": margin, "max_abs_err": 0.01, "rtol": 1e-3, "atol": 1e-5, "reference": "float64",
                            **met})
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"),
              [parity("softmax", "fail", "inf", non_finite=4), parity("add", "pass", 0.25), parity("mul", "pass", 0.5),
               parity("compiled.minilm", "fail", "inf", "float32/forward-backward", cause="unused-zero-grad"),
               parity("mode", "fail", "inf", "float32/forward"), parity("sub", "pass", 0.5, "float32/forward")])
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    md = (out / "matrix.md").read_text()
    summary = md.split("Numerical parity: margins per column and dtype")[1].split("###")[0]
    assert re.search(r"\|\s*float16\s*\|\s*3\s*\|\s*2\s*\|\s*1\s*\|\s*0\s*\|\s*0\.5\s*\|\s*inf: NaN/inf\s*\|",
                     summary), summary
    assert re.search(r"\|\s*float32\s*\|.*\|\s*inf: unused-zero-grad; inf\s*\|", summary), summary
    worst = md.split("worst checks per column and dtype")[1]
    rows = [ln for ln in worst.splitlines() if ln.startswith("| parity/")]
    assert rows[0].startswith("| parity/compiled.minilm") and "inf: unused-zero-grad" in rows[0] and "NaN" not in rows[0]
    assert rows[1].startswith("| parity/mode") and "NaN" not in rows[1]
    softmax = next(r for r in rows if r.startswith("| parity/softmax"))
    assert "inf: NaN/inf" in softmax


def test_a_known_limitation_two_columns_share_word_for_word_is_one_row_naming_both(tmp_path, recorded):
    f = recorded("linux_x86_64")
    same = "known float32 limit against float64 (a product of Householder reflections); margin 2.73"
    limit = {"suite": "parity", "status": "xfail", "category": "parity"}
    write_run(tmp_path / "a.jsonl", f, [rec("svd", reason=same, **limit), rec("lu", reason="margin 1.1", **limit)],
              torch_v="2.6.0")
    write_run(tmp_path / "b.jsonl", f, [rec("svd", reason=same, **limit), rec("lu", reason="margin 1.3", **limit)],
              run="R2", torch_v="2.15.0")
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--out", str(out)]) == 0
    md = (out / "matrix.md").read_text()
    section = md.split("## Known limitations (xfail), with what would lift them")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| parity/")]
    svd = [r for r in rows if r.startswith("| parity/svd ")]
    assert len(svd) == 1 and "torch 2.6.0" in svd[0] and "torch 2.15.0" in svd[0]
    lu = [r for r in rows if r.startswith("| parity/lu ")]  # another margin in each column: a row each
    assert len(lu) == 2 and "margin 1.1" in lu[0] and "margin 1.3" in lu[1]


def test_each_skip_reason_names_what_it_skips_and_counts_a_whole_absent_target(tmp_path, recorded):
    """"116 checks: PyTorch does not compare this op with the CPU" said nothing of which
    ops: a reason's row names its subjects, and counts them where a whole target is absent."""
    said = "PyTorch does not compare this op with the CPU: output is non-deterministic"
    records = [rec(op, "skip", suite="parity", variant=f"float32/{p}", check=f"parity/{op}/float32/{p}", reason=said)
               for op in ("bernoulli", "dropout") for p in ("forward", "backward")]
    records += [rec(f"op{i:02d}", "skip", target="mps", suite="ops", reason="MPS unavailable: this is Linux")
                for i in range(SKIPPED_NAMED + 1)]
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"), records)
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "a.jsonl"), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    section = (out / "matrix.md").read_text().split("## Skipped, grouped by reason")[1].split("\n## ")[0]
    assert re.search(r"\|\s*cpu\s*\|\s*4\s*\|\s*1\s*\|\s*bernoulli, dropout\s*\|\s*PyTorch does not compare", section)
    assert re.search(rf"\|\s*mps\s*\|\s*{SKIPPED_NAMED + 1}\s*\|\s*1\s*\|\s*{SKIPPED_NAMED + 1} subjects\s*\|", section)


def test_the_every_failure_introduction_says_where_each_kind_of_finding_is_explained(tmp_path, recorded):
    """The "Every failure" table lists broken checks (said with their cause and switch in the
    failures by cause above it) and also unsupported ops, unexpected passes and claims that do
    not hold, which that table says nothing of: its introduction limits "said once, in the
    table above" to fails, errors, crashes and timeouts, and says where each other kind it
    lists is explained."""
    from harness.core import runfiles
    from harness.report import sections, verdict
    from harness.report.matrix import build
    f = recorded("linux_x86_64")
    path = write_run(tmp_path / "a.jsonl", f, [
        rec("add/float32", "fail", suite="ops", category="native", reason="wrong"),
        rec("_foo/float32", "pass", suite="ops", category="unsupported", reason="NotImplementedError: _foo"),
        rec("mul/float32/forward", "xpass", suite="parity", category="parity", reason="expected a mismatch; passes"),
        rec("tf32/time", "xfail", suite="optim", category="does-not-hold", reason="x0.9, documented x0.5",
            metrics={"time_ratio": 0.9, "claimed_ratio": 0.5, "bound": 0.6})])
    m = build(runfiles.read_file(path).runs)
    every = next(s for s in sections.outcome_sections(m) if s.anchor == "failures")
    kinds = {row[0] for row in every.rows}
    others = {"unsupported ops", "unexpected passes", "claims that do not hold"}
    assert others <= kinds, kinds   # the table lists them: the introduction must say where they are explained
    said_above = next(x for x in every.intro.split(". ") if "in the table above" in x)
    assert said_above.startswith("Of the fails, errors, crashes and timeouts, "), said_above
    for kind, what in verdict.FINDINGS:
        if kind in others:
            assert f"{kind} ({what}) are explained in " in every.intro, (kind, every.intro)
    assert "in the optimizations section" in every.intro and "in the ops section" in every.intro


def test_a_fact_the_machine_would_not_give_is_not_called_a_known_limitation(tmp_path, recorded):
    """sysctl unreadable (cron's PATH): env/not-rosetta says "cannot tell" (an xfail). The first
    screen called it a known limitation of the versions; it says what it is now."""
    records = [rec("not-rosetta", "xfail", reason="cannot tell whether this x86_64 Python runs under Rosetta 2: ..."),
               rec("threads", "xfail", reason="precision limit of this version"), rec("ok", "pass")]
    write_run(tmp_path / "a.jsonl", recorded("linux_x86_64"), records)
    out = tmp_path / "out"
    report.main([str(tmp_path / "a.jsonl"), "--out", str(out)])
    first = (out / "matrix.md").read_text().split("## Verdict per machine")[1].split("\n## ")[0]
    line = next(x for x in first.splitlines() if x.startswith("  - `!!` environment:"))
    assert "1 known limitation, 1 cannot tell (a fact this machine would not give: env/not-rosetta)" in line, line
