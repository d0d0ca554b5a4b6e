"""One bad record or file never takes the report down, and the reports hold no raw control
character and no unbounded text (issue 26: nothing lost, nothing faked).

The mutation test does what the probe of issue 26 did: real run files (the H100 recording,
and records of a CPU run of the perf suite), one field at a time replaced by a value of
another type, through tools.report and the comparison's reader. Each mutation must end in
a report for the good file given beside it and, where the contract refuses the value, one
line naming the bad file and its line; never an internal error."""
import json
import re

import pytest

from harness.core import records, runfiles
from harness.ops import kernels
from harness.report import compare
from tests.conftest import ROOT, recorded_h100, no_kernels
from tools import compare as compare_cli, kernels as kernels_cli, report

H100 = recorded_h100()
GOOD = H100 / "env.jsonl"
SCHEMA_1 = ROOT / "tests" / "fixtures" / "runs" / "schema1-main-c4eeb0c.jsonl"
WRONG = ([], {}, "", 0, None, True)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _first(path, test) -> dict:
    return next(r for r in _lines(path) if r.get("kind") == "check" and test(r))


HEADER = _lines(H100 / "env.jsonl")[0]
# Records of a CPU run of the perf suite on the project's 2-core VM (reports/runs, not kept in
# the repository), trimmed to the fields the report and compare read.
PERF = [
    {"kind": "check", "check": "perf/memory-bert/loop", "suite": "perf", "subject": "memory-bert", "variant": "loop",
     "target": "cpu", "status": "pass", "category": "steady",
     "metrics": {"workload": "small", "trends": {"rss": {"growth_bytes": 1015808, "ci_low": 749568.0,
                                                        "ci_high": 1212416.0, "tolerance_bytes": 16777216,
                                                        "per_step_bytes": 37622.5, "verdict": "steady"}},
                 "given_back": {"rss": 0}, "model": "BertForSequenceClassification, 4 layers"},
     "reason": "steady: rss 0.969 MiB", "duration_s": 18.76},
    {"kind": "check", "check": "perf/model-bert/varying-length", "suite": "perf", "subject": "model-bert",
     "variant": "varying-length", "target": "cpu", "status": "pass", "category": "noisy",
     "metrics": {"workload": "small", "per_shape_s": 0.0033, "ci_low": -0.0119, "ci_high": 0.0744, "seen_s": 0.1937,
                 "lengths": [31, 49, 36, 30, 56, 55], "threads": 1, "control_s": 0.000996},
     "reason": "a new shape costs 3.32 ms per step", "duration_s": 10.26},
    {"kind": "check", "check": "perf/model-bert/train-step", "suite": "perf", "subject": "model-bert",
     "variant": "train-step", "target": "cpu", "status": "pass", "category": "timed",
     "metrics": {"workload": "small", "median_s": 0.2922, "ci_low": 0.2897, "ci_high": 0.3019, "rounds": 7,
                 "control_s": 0.00106, "threads": 1, "per_second": 54.75, "unit": "samples/s"},
     "reason": "292 ms per call", "duration_s": 16.83},
]
RECORDS = {
    "env": _first(H100 / "env.jsonl", lambda r: r["metrics"]),
    "ops-model": _first(H100 / "ops.jsonl", lambda r: "model" in r["metrics"]),
    "parity": _first(H100 / "parity.jsonl", lambda r: r["status"] == "fail" and "inputs" in r["metrics"]),
    "optim-claim": _first(H100 / "optim-small.jsonl", lambda r: "mem_ratio" in r["metrics"]
                          and "ci_low" in r["metrics"]),
    "seed-003-path": _first(H100 / "optim-large-seed003.jsonl", lambda r: "rows" in r["metrics"]),
    "known-bug": _first(SCHEMA_1, lambda r: r["metrics"].get("known_bug")),
    **{r["check"]: r for r in PERF},
}


def _paths(obj, depth: int, prefix: tuple = ()):
    """Every field of ``obj`` down to ``depth`` levels (of a list, its first two items)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj[:2]) if isinstance(obj, list) else ()
    for key, value in items:
        yield prefix + (key,)
        if depth > 1 and isinstance(value, (dict, list)):
            yield from _paths(value, depth - 1, prefix + (key,))


def _with(obj: dict, path: tuple, value) -> dict:
    out = json.loads(json.dumps(obj))
    place = out
    for key in path[:-1]:
        place = place[key]
    place[path[-1]] = value
    return out


def _write(path, header: dict, recs: list[dict]):
    run = header.get("run") if isinstance(header.get("run"), str) else "R"
    lines = [header, *({**r, "run": run} for r in recs), {"kind": "end", "run": run}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


CHARTED = ("optim-claim", "seed-003-path", "known-bug")   # their report draws a chart (a tenth of a second)


def _mutations():
    """(what, header, record, path, value): every field of the header's facts and fields, and of
    each record (top level and inside, its metrics' parts), with two of the wrong values each
    (one for a record whose report draws a chart), taken in turn, so that every wrong value
    meets every kind of field and the test stays short."""
    turn = 0
    for path in _paths(HEADER, 4):
        if path[0] in ("kind", "run", "schema"):
            continue
        for value in (WRONG[turn % 6], WRONG[(turn + 3) % 6]):
            yield "header", _with(HEADER, path, value), RECORDS["env"], path, value
        turn += 1
    for name, rec in RECORDS.items():
        for path in _paths(rec, 4):
            if path[0] in ("kind", "run"):
                continue
            for value in (WRONG[turn % 6],) if name in CHARTED else (WRONG[turn % 6], WRONG[(turn + 3) % 6]):
                yield name, HEADER, _with(rec, path, value), path, value
            turn += 1


def test_one_field_of_another_type_never_takes_the_report_or_compare_down(tmp_path, capsys):
    """The probe's mutations: tools.report writes the matrix of the good file given beside the
    bad one, says the bad file's line where the contract refuses the value (exit 2), and the
    comparison's reader either reads the bad file or refuses it with CompareError's one line."""
    good_checks = {r["check"] for r in _lines(GOOD) if r.get("kind") == "check"}
    failures, refused, count = [], 0, 0
    for n, (what, header, rec, path, value) in enumerate(_mutations()):
        count += 1
        case = f"{what}: {'.'.join(map(str, path))} = {value!r}"
        bad = _write(tmp_path / f"bad{n}.jsonl", header, [rec])
        clean = _write(tmp_path / f"clean{n}.jsonl", HEADER, [RECORDS[what] if what != "header" else rec])
        out = tmp_path / f"out{n}"
        status = report.main([str(bad), str(GOOD), "--out", str(out), "--no-baseline", "--kernels",
                              no_kernels(tmp_path)])
        err = capsys.readouterr().err
        named = re.findall(rf"^error: {re.escape(str(bad))}:(\d+): ", err, re.M)
        if "internal error" in err or not (out / "matrix.json").is_file():
            failures.append(f"{case}: the report was not written: {err.strip()[:300]}")
            continue
        cells = json.loads((out / "matrix.json").read_text())["cells"]
        if not good_checks <= set(cells):
            failures.append(f"{case}: the good file's checks are missing from the matrix")
        if status not in (0, 2) or (status == 2) != bool(named):
            failures.append(f"{case}: exit {status}, bad file named at lines {named}: {err.strip()[:300]}")
        refused += bool(named)
        try:
            compare.load_side([str(bad)])
        except compare.CompareError as exc:
            if str(bad) not in str(exc):
                failures.append(f"{case}: load_side's line does not name the file: {exc}")
        except Exception as exc:  # noqa: BLE001 - the point: nothing but CompareError
            failures.append(f"{case}: load_side raised {type(exc).__name__}: {exc}")
        status = compare_cli.main([str(clean), str(bad), "--format", "json"])
        err = capsys.readouterr().err
        if status not in (0, 1, 2) or "internal error" in err:
            failures.append(f"{case}: tools.compare exit {status}: {err.strip()[:300]}")
    assert not failures, f"{len(failures)} of {count} mutations:\n" + "\n".join(failures[:40])
    assert count > 450 and refused > 200, (count, refused)   # the sample reaches the contract's fields


def test_a_header_fact_of_another_type_is_left_out_and_said_and_its_records_kept(tmp_path, capsys):
    """facts.os = [] took the whole report down ("internal error: AttributeError", no file named,
    no matrix for the good file either)."""
    header = {**_with(HEADER, ("facts", "os"), []), "run": "BAD", "env_id": "bad-env"}
    bad = _write(tmp_path / "bad.jsonl", header, [RECORDS["env"]])
    out = tmp_path / "out"
    assert report.main([str(bad), str(GOOD), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {bad}:1: header field facts.os is a list, not an object: left out"]
    doc = json.loads((out / "matrix.json").read_text())
    assert doc["errors"] == [f"{bad}:1: header field facts.os is a list, not an object: left out"]
    [column] = [c for c in doc["columns"] if c["env_id"] == "bad-env"]
    assert "os" not in column["facts"] and column["facts"]["host"] == HEADER["facts"]["host"]
    assert doc["cells"][RECORDS["env"]["check"]][column["id"]]["status"] == RECORDS["env"]["status"]
    assert any(c["env_id"] == HEADER["env_id"] for c in doc["columns"])   # the good file's column
    with pytest.raises(compare.CompareError, match=re.escape(f"{bad}:1: header field facts.os is a list")):
        compare.load_side([str(bad)])


def test_a_header_without_a_usable_env_id_skips_its_run_in_one_line(tmp_path, capsys):
    bad = _write(tmp_path / "bad.jsonl", _with(HEADER, ("env_id",), {}), [RECORDS["env"]])
    out = tmp_path / "out"
    assert report.main([str(bad), str(GOOD), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {bad}:1: header field env_id is an object, not text: this run's header and records are skipped "
        "(and 2 more problem line(s))"]
    assert json.loads((out / "matrix.json").read_text())["cells"]   # the good file's matrix


@pytest.mark.parametrize("metric, value, said", [
    ("fallback_ops", True, "field metrics.fallback_ops is true, not a list"),
    ("fallback_ops", ["aten::add", 3], "field metrics.fallback_ops[1] is a whole number, not text"),
    ("ops", "forward", "field metrics.ops is text, not an object"),
    ("known_bug", 1, "field metrics.known_bug is a whole number, not text"),
    ("trends", {"rss": {"growth_bytes": None}}, 'field metrics.trends.rss.growth_bytes is null, not a finite number'),
    ("rows", [{"row": "baseline", "peak_bytes": 0, "step_s": 1.0}], "field metrics.rows[0].peak_bytes is 0, not a "
                                                                     "positive number"),
    ("ci_low", float("inf"), "field metrics.ci_low is the literal Infinity, not a finite number"),
])
def test_a_metric_of_another_type_skips_that_record_alone_in_one_line(tmp_path, capsys, metric, value, said):
    """The metrics the report reads as objects, lists, text or numbers: a record that holds one
    of another type is skipped with its file and line; the other records of its file stay."""
    bad_rec = {**RECORDS["env"], "check": "env/bad", "metrics": {**RECORDS["env"]["metrics"], metric: value}}
    bad = _write(tmp_path / "bad.jsonl", HEADER, [RECORDS["env"], bad_rec])
    out = tmp_path / "out"
    assert report.main([str(bad), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {bad}:3: {said}"), line
    cells = json.loads((out / "matrix.json").read_text())["cells"]
    assert RECORDS["env"]["check"] in cells and "env/bad" not in cells


def test_a_judged_again_note_brought_by_a_run_file_is_not_taken_for_the_reports_own(tmp_path, capsys):
    rec = {**RECORDS["env"], "judged_again": "forged"}
    out = tmp_path / "out"
    assert report.main([str(_write(tmp_path / "a.jsonl", HEADER, [rec])), "--out", str(out), "--kernels",
                        no_kernels(tmp_path)]) == 0
    cell = json.loads((out / "matrix.json").read_text())["cells"][rec["check"]]
    assert all("judged_again" not in c for c in cell.values())


def test_nan_and_infinity_in_a_record_leave_matrix_json_strict_json_with_the_metrics_whole(tmp_path, capsys):
    """Python's json reads the literals NaN, Infinity and -Infinity; matrix.json spells them
    "nan", "inf", "-inf", and a record's nested metrics (seed 003's rows) stay objects, not
    the text of a Python dict."""
    path_rec = RECORDS["seed-003-path"]
    rows = [dict(r) for r in path_rec["metrics"]["rows"]]
    rows[1]["time_ratio"] = float("nan")
    recs = [{**RECORDS["parity"], "metrics": {**RECORDS["parity"]["metrics"], "margin": float("nan"),
                                              "max_abs_err": float("inf"), "extra": {"low": float("-inf")}}},
            {**path_rec, "metrics": {**path_rec["metrics"], "rows": rows}}]
    run = _write(tmp_path / "a.jsonl", {**HEADER, "judges": dict(records.JUDGES)}, recs)   # today's judge
    assert "NaN" in run.read_text() and "-Infinity" in run.read_text()
    out = tmp_path / "out"
    assert report.main([str(run), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0

    def refuse(constant):
        raise ValueError(f"matrix.json holds the non-JSON literal {constant}")
    doc = json.loads((out / "matrix.json").read_text(), parse_constant=refuse)
    parity = next(iter(doc["cells"][RECORDS["parity"]["check"]].values()))["metrics"]
    assert (parity["margin"], parity["max_abs_err"], parity["extra"]) == ("nan", "inf", {"low": "-inf"})
    shown_rows = next(iter(doc["cells"][path_rec["check"]].values()))["metrics"]["rows"]
    assert shown_rows[1]["time_ratio"] == "nan" and shown_rows[0] == path_rec["metrics"]["rows"][0]


CONTROLS = "a\x00b\x1b[31mred\x07\x7f\x9bc"


def test_control_characters_are_spelt_out_in_md_html_and_the_terminal_and_kept_in_json(tmp_path, capsys):
    rec = {**RECORDS["env"], "status": "fail", "reason": CONTROLS, "check": "env/" + CONTROLS,
           "metrics": {**RECORDS["env"]["metrics"], "note": CONTROLS}}
    out = tmp_path / "out"
    assert report.main([str(_write(tmp_path / "a.jsonl", HEADER, [rec])), "--out", str(out), "--kernels",
                        no_kernels(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for name in ("matrix.md", "matrix.html"):
        raw = (out / name).read_bytes()
        assert not re.search(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]|\xc2[\x80-\x9f]", raw), name
        assert "a\\x00b\\x1b[31mred" in (out / name).read_text().replace("\\\\", "\\"), name
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", printed) and "\\x1b[31m" in printed
    doc = json.loads((out / "matrix.json").read_text())
    assert doc["cells"]["env/" + CONTROLS][next(iter(doc["cells"]["env/" + CONTROLS]))]["reason"] == CONTROLS


def test_a_huge_reason_is_cut_where_it_is_shown_and_kept_whole_in_json(tmp_path, capsys):
    """A 2 MB reason was copied whole into every place that shows it (pages of tens of MB):
    the tables, hover texts, failure groups and cards show SHOWN_CHARS of it and say how many
    more there are; the details panel at most PANEL_CHARS; matrix.json all of it."""
    reason = "R" * 2_000_000
    recs = [{**RECORDS["env"], "status": "fail", "reason": reason},
            {**RECORDS["parity"], "reason": reason, "metrics": {**RECORDS["parity"]["metrics"], "cause": reason,
                                                                "cause_what": reason, "switch": reason}}]
    out = tmp_path / "out"
    header = {**HEADER, "judges": dict(records.JUDGES)}   # today's judge: the reason is the record's own
    assert report.main([str(_write(tmp_path / "a.jsonl", header, recs)), "--out", str(out), "--kernels",
                        no_kernels(tmp_path)]) == 0
    md, page = (out / "matrix.md").read_text(), (out / "matrix.html").read_text()
    assert len(md) + len(page) < 400_000
    from harness.report.matrix import SHOWN_CHARS
    from harness.report.page import PANEL_CHARS
    panel = page.split("<script type='application/json' id='records'>")[1].split("</script>")[0]
    outside = page.replace(panel, "")
    for text in (md, outside):
        assert max(len(run) for run in re.findall("R+", text)) == SHOWN_CHARS
        assert f"…({len(reason) - SHOWN_CHARS:,} more characters in matrix.json)" in text
    assert max(len(run) for run in re.findall("R+", panel)) == PANEL_CHARS
    doc = json.loads((out / "matrix.json").read_text())
    assert all(cell["reason"] == reason for cols in doc["cells"].values() for cell in cols.values())


def _table(ops, version="2.6.0", **extra) -> str:
    return json.dumps({"schema": 1, "torch_version": version, "source": "test", "mps_ops": ops,
                       "counts": {"entries": 10}, "caveat": "c", **extra})


@pytest.mark.parametrize("field, value, said", [("mps_ops", "add.out", "field mps_ops is str, not a list"),
                                                ("mps_ops", ["add.out", 3], "field mps_ops[1] is int, not an op"),
                                                ("counts", [], "field counts is list, not an object"),
                                                ("caveat", 5, "field caveat is int, not text"),
                                                ("torch_version", [], "field torch_version is list, not text")])
def test_a_kernel_table_field_of_another_type_is_one_line_and_the_other_tables_still_used(tmp_path, capsys, field,
                                                                                         value, said):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "2.6.0.json").write_text(_table(["add.out", "old_op"]))
    (kdir / "2.14.1.json").write_text(json.dumps({**json.loads(_table(["add.out"], "2.14.1")), field: value}))
    out = tmp_path / "out"
    assert report.main([str(GOOD), "--out", str(out), "--kernels", str(kdir)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {kdir / '2.14.1.json'}: {said}") and line.endswith("the table is left out")
    assert [p["torch_version"] for p in json.loads((out / "matrix.json").read_text())["predicted"]] == ["2.6.0"]


def test_a_kernel_table_file_given_to_kernels_is_read_and_a_diff_there_is_one_line(tmp_path, capsys):
    """--kernels FILE used to be ignored without a word: one table's file is read as a table."""
    table = tmp_path / "2.6.0.json"
    table.write_text(_table(["add.out", "mm.out"]))
    out = tmp_path / "out"
    assert report.main([str(GOOD), "--out", str(out), "--kernels", str(table)]) == 0
    assert [p["torch_version"] for p in json.loads((out / "matrix.json").read_text())["predicted"]] == ["2.6.0"]
    diff = tmp_path / "diff-2.6.0-2.14.1.json"
    diff.write_text(json.dumps({"schema": 1, "gained": [], "lost": []}))
    capsys.readouterr()
    assert report.main([str(GOOD), "--out", str(out), "--kernels", str(diff)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {diff}: not a kernel table (no mps_ops: a saved diff?)")


def test_kernels_that_are_not_there_are_one_line_and_the_matrix_is_left_as_it_was(tmp_path, capsys):
    """`tools.report --kernels reports/kernel` (a typo) wrote the matrix without its predicted
    section and said nothing: a path given that is not there is refused before anything is
    written; an empty directory is no tables."""
    out = tmp_path / "out"
    assert report.main([str(GOOD), "--out", str(out), "--kernels", no_kernels(tmp_path), "--no-baseline"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert report.main([str(GOOD), "--out", str(out), "--kernels", str(tmp_path / "kernel"), "--no-baseline"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --kernels {tmp_path / 'kernel'}: no such file or directory (give the directory of python -m "
        "tools.kernels --save's tables, an empty one for none, or leave the option out)"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("option", ["--out", "--kernels", "--baseline"])
def test_an_empty_path_option_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, option):
    """--out "" wrote the matrix into the current directory."""
    monkeypatch.chdir(tmp_path)
    args = [str(GOOD), option, ""] + (["--out", str(tmp_path / "out")] if option != "--out" else [])
    assert report.main(args) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {option} is empty: give a path, or leave the option "
                                                    "out for its default"]
    assert list(tmp_path.iterdir()) == []


def test_a_baseline_named_that_cannot_be_read_writes_no_matrix(tmp_path, capsys):
    """`tools.report --baseline MISSING` said its error, then replaced the matrix with one
    compared with nothing, and exited 2: the page asked for was not the page written."""
    out = tmp_path / "out"
    assert report.main([str(GOOD), "--out", str(out), "--no-baseline"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    for bad in (tmp_path / "missing.jsonl", tmp_path / "garbage.jsonl"):
        if bad.name == "garbage.jsonl":
            bad.write_text("not json\n")
        assert report.main([str(GOOD), "--out", str(out), "--baseline", str(bad)]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: --baseline: {bad}") and line.endswith(
            f"no matrix written (the one in {out} is as it was)"), line
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("entry, said", [("  dispatch: 5\n", "dispatch is int, not a mapping"),
                                         ("  structured_delegate: [add.out]\n", "structured_delegate is list")])
def test_a_native_functions_entry_of_another_type_is_one_line_in_tools_kernels(tmp_path, capsys, entry, said):
    import zipfile
    wheel = tmp_path / "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(kernels.YAML_MEMBER, "- func: add.out(Tensor self) -> Tensor\n  dispatch:\n    MPS: add\n"
                                         "- func: add(Tensor self) -> Tensor\n" + entry)
    assert kernels_cli.main(["--wheel", str(wheel)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and f"entry 'add': {said}" in line


def test_the_contract_reads_every_recorded_run_file_whole():
    """The types the readers rely on are the ones the harness writes: every record and header
    of the H100 recording and of the schema-1 file keeps them (none is refused or cut)."""
    for path in [*sorted(H100.glob("*.jsonl")), SCHEMA_1]:
        run_file = runfiles.read_file(path)
        assert run_file.errors == [], path
        for line in _lines(path):
            if line.get("kind") == "header":
                assert records.check_header(line) == (line, []), path
