"""The record contract (harness/core/records.py): files written before a schema change are still
read and compared, the special records are found by their kind, and every category the
judges write is in the contract."""
import ast
import json
import shutil
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from harness.core import records, runfiles
from harness.report import verdict
from tests.conftest import recorded_h100, recorded_h100_controls, recorded_h100_full, recorded_h200, ROOT, no_kernels
from tools import compare as compare_cli, report

# Written by main at c4eeb0c (schema 1): the env suite and two known-bug cases on the CPU.
SCHEMA_1 = ROOT / "tests" / "fixtures" / "runs" / "schema1-main-c4eeb0c.jsonl"
H100 = recorded_h100()   # real hardware, kept in tests/fixtures/recorded


def _header(path) -> dict:
    return json.loads(path.read_text().splitlines()[0])


def test_a_run_file_written_before_the_change_is_read_as_todays_schema():
    assert _header(SCHEMA_1)["schema"] == 1
    run_file = runfiles.read_file(SCHEMA_1)
    assert not run_file.errors
    recs = [r for run in run_file.runs for r in run.records]
    kinds = {r["variant"].split("/")[-1]: records.kind_of(r) for r in recs if r["suite"] == "parity"}
    assert kinds == {"known-bug": "known-bug", "repeatable": "repeatable"}
    assert all(records.kind_of(r) is None for r in recs if r["suite"] == "env")


def test_a_baseline_written_before_the_change_compares_clean_with_a_run_of_today(tmp_path, capsys):
    """The same checks and results, one side schema 1 and the other schema 2: no regression,
    nothing appeared or disappeared."""
    lines = SCHEMA_1.read_text().splitlines()
    today = [json.dumps({**json.loads(lines[0]), "schema": records.SCHEMA})]
    for line in lines[1:]:
        obj = json.loads(line)
        if obj.get("kind") == "check":
            obj = records.update_to_2(obj)
        today.append(json.dumps(obj))
    candidate = tmp_path / "today.jsonl"
    candidate.write_text("\n".join(today) + "\n")
    baseline = tmp_path / "baseline.jsonl"
    shutil.copy(SCHEMA_1, baseline)
    assert compare_cli.main([str(baseline), str(candidate), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["changes"] == [] and result["baseline"]["checks"] == result["candidate"]["checks"] == 29, result


ENV_CHECKS_ADDED_SINCE_SCHEMA_1 = {"env/kernel-env"}   # PYTORCH_MPS_FAST_MATH and PYTORCH_MPS_PREFER_METAL


def test_a_baseline_written_before_the_change_compares_clean_with_a_real_run_of_today(tmp_path, capsys):
    """Today's code run for real on the checks the schema-1 file holds (the env suite and
    two known-bug cases), compared against that file as the baseline: every check is still
    there under the same id, and nothing regressed."""
    today = tmp_path / "today.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/env", "suites/parity/test_known_bugs.py",
                          "-k", "test_environment or matmul-3x3 or argmax-dim1-10x2", "-p", "no:cacheprovider",
                          "-q", "--run-file", str(today)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert compare_cli.main([str(SCHEMA_1), str(today), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # the file's known-bug checks were run on the cpu target only; today's run also
    # records them skipped on cuda and mps: those appear, and the env checks added since the
    # file was written (named here, one by one); nothing else may change
    assert result["baseline"]["checks"] == 29 and result["candidate"]["checks"] >= 29, result
    assert {c["kind"] for c in result["changes"]} <= {"appeared"}, result["changes"]
    assert all(c["check"].startswith("parity/") or c["check"] in ENV_CHECKS_ADDED_SINCE_SCHEMA_1
               for c in result["changes"]), result["changes"]


def test_seed_003_path_of_a_schema_1_run_is_found_by_its_derived_kind(tmp_path):
    """The recorded H100 run (schema 1) names seed 003's path only by the test that wrote it;
    the migration names its kind, and the report draws the path from that."""
    out = tmp_path / "out"
    assert report.main([str(H100 / "optim-small.jsonl"), "--out", str(out)]) == 0
    assert "Memory-saving steps, one after another, on" in (out / "matrix.md").read_text()
    assert list(out.glob("seed003_*.png"))


def test_update_to_2_names_only_the_special_records():
    path = {"suite": "optim", "subject": records.PATH_SUBJECT, "variant": "", "metrics": {"rows": []}}
    assert records.update_to_2(path)["metrics"]["record_kind"] == "seed-003-path"
    claim = {"suite": "optim", "subject": "adafactor", "variant": "memory", "metrics": {"mem_ratio": 0.5}}
    assert "record_kind" not in records.update_to_2(claim)["metrics"]
    known = {"suite": "parity", "subject": "matmul-3x3", "variant": "float32/repeatable",
             "metrics": {"known_bug": "matmul-3x3"}}
    assert records.update_to_2(known)["metrics"]["record_kind"] == "repeatable"
    assert claim["metrics"] == {"mem_ratio": 0.5}, "a migration returns a new record"


@pytest.mark.parametrize("schema", [0, records.SCHEMA + 1, "2", True, None])
def test_a_schema_the_reader_does_not_know_is_one_line(tmp_path, schema):
    lines = SCHEMA_1.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([json.dumps({**json.loads(lines[0]), "schema": schema}), *lines[1:]]) + "\n")
    run_file = runfiles.read_file(bad)
    assert not run_file.runs and any(f"this reader understands 1 to {records.SCHEMA}" in e for e in run_file.errors)


def test_every_migration_step_is_there():
    assert sorted(records.MIGRATIONS) == list(range(2, records.SCHEMA + 1))


def test_the_vocabulary_is_spelt_once_and_every_category_is_in_the_contract():
    """Statuses and categories are the record contract's constants (harness/core/records.py):
    each word once, every category a suite writes in CATEGORIES, and the schema-1 file's
    categories among them."""
    words = {v for k, v in vars(records.Category).items() if k.isupper() and isinstance(v, str)}
    assert words == set(records.ALL_CATEGORIES)
    assert set(records.Status.VERDICTS) == set(records.Status.ALL) - {records.Status.ERROR}
    for run in runfiles.read_file(SCHEMA_1).runs:
        for r in run.records:
            assert r["category"] in records.CATEGORIES[r["suite"]], r["check"]


def _spelt_by_hand(source: str) -> list[str]:
    """Where code spells a status or category itself: a string literal as a Verdict's status
    or category, or assigned to a record's category; and the old spellings of the claim words."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Verdict":
            given = list(node.args[:2]) + [k.value for k in node.keywords if k.arg in ("status", "category")]
            found += [f"line {node.lineno}: Verdict({arg.value!r})" for arg in given
                      if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "category"
                                                for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                found.append(f"line {node.lineno}: category = {node.value.value!r}")
        if isinstance(node, ast.Constant) and node.value in ("does not hold", "not higher", "not lower"):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


@pytest.mark.parametrize("path", sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "suites").rglob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_judge_spells_a_status_or_category_by_hand(path):
    assert not _spelt_by_hand(path.read_text(encoding="utf-8")), path


def test_the_hand_spelling_rule_catches_a_planted_one():
    assert _spelt_by_hand('Verdict("fail", "parity", "x")') == ["line 1: Verdict('fail')", "line 1: Verdict('parity')"]
    assert _spelt_by_hand('record.category = "parity"') == ["line 1: category = 'parity'"]
    assert _spelt_by_hand('r = {"verdict": "does not hold"}') == ["line 1: 'does not hold'"]
    assert _spelt_by_hand("Verdict(Status.FAIL, Category.PARITY, 'x')") == []


# --------------------------------------------------------------------------- the second H100 recording

def _report_of(files: list[Path], out: Path) -> str:
    """matrix.md of these run files alone (no kernel table or baseline from this checkout)."""
    assert report.main([*map(str, files), "--out", str(out), "--kernels", no_kernels(out), "--no-baseline"]) == 0
    return (out / "matrix.md").read_text()


def test_every_suites_controls_passed_on_the_h100_and_the_report_says_so(tmp_path):
    """The recording of 2026-11-24: each suite's cuda run holds its controls (ops 3, parity 3,
    optim 3, perf 2), all passed, and the report, reading the real files, marks the cuda
    column's instruments checked, naming the suites. (Under -n 12 the records are written as
    checks end, so a control started first may be written after hundreds of op checks.)"""
    rec = recorded_h100_controls()
    for name, expected in (("ops", 3), ("parity", 3), ("perf", 2), ("optim-after", 3)):
        controls = [r for run in runfiles.read_file(rec / f"{name}.jsonl").runs for r in run.records
                    if r["target"] == "cuda" and r["check"].split("/")[1] == "controls"]
        assert len(controls) == expected and all(r["status"] == "pass" for r in controls), name
    md = _report_of([rec / f"{n}.jsonl" for n in ("env", "ops", "parity", "perf", "optim-after")], tmp_path)
    line = next(x for x in md.splitlines() if "` instruments:" in x)
    assert "`OK` instruments" in line and "11 controls passed (ops, parity, optim, perf)" in line, line


def test_a_run_interrupted_by_its_time_limit_is_partial_in_the_report_and_in_compare(tmp_path, capsys):
    """The H100's parity and optim runs were stopped by a time limit's SIGINT: pytest wrote the
    end line with exit status 2. The reader takes such a run as cut short, so the report's
    verdict says so, and compare refuses it as a side of an upgrade check (what it did not
    reach may be what broke) unless --partial, where it notes that the unreached checks are
    missing."""
    rec = recorded_h100_controls()
    parity = runfiles.read_file(rec / "parity.jsonl").runs[0]
    assert parity.end["exitstatus"] == runfiles.INTERRUPTED and not parity.complete
    assert all(run.complete for run in runfiles.read_file(rec / "ops.jsonl").runs)
    assert "cut off or interrupted before its end" in _report_of([rec / "parity.jsonl"], tmp_path)
    capsys.readouterr()
    assert compare_cli.main([str(rec / "optim-before.jsonl"), str(rec / "optim-after.jsonl")]) == 2
    refused = capsys.readouterr()
    assert refused.out == "" and "was cut off before its end" in refused.err and "--partial" in refused.err
    assert compare_cli.main([str(rec / "optim-before.jsonl"), str(rec / "optim-after.jsonl"), "--partial"]) == 0
    assert "note: the candidate run was cut off or interrupted" in capsys.readouterr().out


def test_the_optim_speed_change_kept_every_h100_verdict_and_memory_to_the_byte(capsys):
    """Before (4e8467d) and after (weighing an accumulated step over two micro-batches, a
    family's rounds set by its whole round), on the same H100: compare finds every check the
    two runs share unchanged, and every memory ratio is the same figure. (The after run was
    written before its records named the micro-batches weighed: micro_batches_weighed_a/_b.)"""
    rec = recorded_h100_controls()
    assert compare_cli.main([str(rec / "optim-before.jsonl"), str(rec / "optim-after.jsonl"), "--format", "json",
                             "--partial"]) == 0   # the after run was stopped by its time limit
    result = json.loads(capsys.readouterr().out)
    assert result["changes"] == [] and result["in_common"] == 28, result["counts"]
    before, after = ({r["check"]: r for run in runfiles.read_file(rec / f"optim-{s}.jsonl").runs for r in run.records}
                     for s in ("before", "after"))
    memory = [c for c in before if c.endswith("/memory") and before[c]["status"] != "skip"]
    assert len(memory) == 4
    assert all(before[c]["metrics"]["mem_ratio"] == after[c]["metrics"]["mem_ratio"] for c in memory)
    assert compare_cli.main([str(rec / "optim-before.jsonl"), str(rec / "optim-after.jsonl"), "--partial"]) == 0
    out = capsys.readouterr().out
    assert "- machines:" not in out and "compared across two machines" not in out   # one H100, both runs


def test_the_whole_optim_suite_ran_on_the_h200_and_the_report_judges_every_claim(tmp_path):
    """The recording of 2026-11-27: one run of the 61 selected optim checks on cuda, ended with
    exit status 0, on the large workload; its 3 controls passed, every measured claim has a
    verdict, and the report's first screen for that column says how many help and how many
    do not, from those records: 18 of the 22 that hold save (the H100's 18 too), counted by
    technique (the headline counts techniques, the claims that do not hold as claims; a technique
    is the subject of a claim, never the seed-003 path's check, which records a ratio but claims
    nothing); pin-memory's
    time x0.98 is no saving, its interval 0.93-1.04 crossing 1, and is said with the others
    that hold with no saving."""
    rec = recorded_h200()
    (run,) = runfiles.read_file(rec / "optim.jsonl").runs
    assert run.complete and run.end["exitstatus"] == 0 and len(run.records) == 61
    assert run.end["workloads"]["cuda"]["name"] == "large"
    controls = [r for r in run.records if r["check"].split("/")[1] == "controls"]
    assert len(controls) == 3 and all(r["status"] == "pass" for r in controls)
    measured = [r for r in run.records if r not in controls and (r.get("metrics") or {}).get("bound") is not None]
    assert Counter(r["category"] for r in measured) == {"holds": 22, "does-not-hold": 5, "inconclusive": 3}
    md = _report_of([rec / "optim.jsonl", rec / "env.jsonl"], tmp_path)
    lines = md.splitlines()
    column = next(i for i, x in enumerate(lines) if "**NVIDIA H200" in x and "· cuda**" in x)
    helping, techniques = _techniques(measured)
    assert lines[column].endswith(f"fit; {helping} of {techniques} optimizations help (best: adafactor memory x0.43), "
                                  f"{Counter(r['category'] for r in measured)['does-not-hold']} claims do not "
                                  "hold"), lines[column]
    optim = next(x for x in lines[column:] if "optimizations:" in x)
    assert "; 4 claims hold with no saving, as documented (" in optim, optim
    [cuda] = [v for v in verdict.for_records(run.header, run.records, run.end) if v.title.endswith("· cuda")]
    detail = next(a.detail for a in cuda.aspects if a.name == "optimizations")
    assert "holds, no saving: pin-memory time through the Trainer x0.98 (large workload)" in detail, detail
    assert "`OK` instruments" in lines[column + 1] and "3 controls passed (optim)" in lines[column + 1]


def test_the_h200_run_keeps_every_h100_verdict_and_memory_ratio_and_compare_names_the_two_cards(capsys):
    """The H100's run at 4e8467d (cut off after 28 checks) against the H200's of today (all 61):
    the 28 both hold are unchanged, every memory ratio the same figure. The two ran on
    different cards: compare names both, and says that the claims' ratios are each machine's."""
    h100, h200 = recorded_h100_controls() / "optim-before.jsonl", recorded_h200() / "optim.jsonl"
    assert compare_cli.main([str(h100), str(h200), "--partial", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    counts = result["counts"]
    assert (counts["regression"], counts["warning"], counts["improvement"]) == (0, 0, 0), result["changes"]
    assert result["in_common"] == 28 and counts["unchanged"] == 28 and counts["appeared"] == 33
    assert "H100" in result["baseline"]["machine"] and "H200" in result["candidate"]["machine"]
    assert any("optimization claim(s) compared across two machines" in n for n in result["notes"])
    before, after = ({r["check"]: r for run in runfiles.read_file(p).runs for r in run.records} for p in (h100, h200))
    memory = [c for c in before if "mem_ratio" in (before[c].get("metrics") or {})]
    assert len(memory) == 5      # four memory claims and the smaller-batch control
    assert all(before[c]["metrics"]["mem_ratio"] == after[c]["metrics"]["mem_ratio"] for c in memory)
    assert compare_cli.main([str(h100), str(h200), "--partial"]) == 0
    out = capsys.readouterr().out
    assert "- machines:  " in out and out.index("NVIDIA H100") < out.index("NVIDIA H200")


def _compare_json(capsys, *args) -> dict:
    assert compare_cli.main([*map(str, args), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _techniques(claims: list[dict]) -> tuple[int, int]:
    """(how many techniques measured a saving, how many techniques were measured) of these claim
    records (category holds, does-not-hold or inconclusive): what the headline's "N of M
    optimizations help" counts, each technique once."""
    assert claims and all(r["category"] in records.Category.CLAIM_VERDICTS for r in claims)
    return (len({r["subject"] for r in claims if r["category"] == "holds" and verdict.saves(r)}),
            len({r["subject"] for r in claims}))


def _by_check(path: Path) -> dict[str, dict]:
    return {r["check"]: r for run in runfiles.read_file(path).runs for r in run.records}


def test_the_whole_optim_suite_ran_on_an_h100_within_its_budget_and_kept_every_h200_verdict(capsys):
    """The recording of 2026-11-28, on the card the issue's budget names: the 61 selected optim
    checks in one run, ended with exit status 0, in under 600 s from header to end line; and
    against the H200's run of 2026-11-27 (an older tree) not one verdict changed, and every
    memory ratio is the same figure (the tracked storages do not depend on the card)."""
    h100, h200 = recorded_h100_full() / "optim.jsonl", recorded_h200() / "optim.jsonl"
    (run,) = runfiles.read_file(h100).runs
    assert run.complete and run.end["exitstatus"] == 0 and len(run.records) == 61
    assert run.header["facts"]["torch"]["cuda_devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert run.header["facts"]["suite_revision"] == "e0ba73653b1a"    # a clean tree
    wall = datetime.fromisoformat(run.end["finished"]) - datetime.fromisoformat(run.header["started"])
    assert wall.total_seconds() == 458   # the recorded figure; against the budget: tests/test_optim_account.py
    result = _compare_json(capsys, h200, h100)
    assert result["counts"] == {"regression": 0, "warning": 0, "improvement": 0, "appeared": 0,
                                "disappeared": 0, "unchanged": 61}, result["changes"]
    assert any("compared across two machines" in n for n in result["notes"])
    before, after = _by_check(h200), _by_check(h100)
    memory = [c for c in before if "mem_ratio" in (before[c].get("metrics") or {})]
    assert len(memory) == 16   # 14 memory claims, the smaller-batch control, the seed path
    assert all(before[c]["metrics"]["mem_ratio"] == after[c]["metrics"]["mem_ratio"] for c in memory)
    assert [c for c in before if before[c].get("category") != after[c].get("category")] == []


def test_the_h100_ops_run_of_today_against_the_one_of_2026_11_24_names_the_fixed_sample(capsys):
    """5,304 op checks, all passing; against the H100's ops run three days older: no regression,
    the two _softmax_backward_data failures (a sample made only for the device string 'cuda',
    fixed since) are improvements, and the MiniLM step, deselected here for want of its weights,
    disappeared."""
    old, new = recorded_h100_controls() / "ops.jsonl", recorded_h100_full() / "ops.jsonl"
    (run,) = runfiles.read_file(new).runs
    assert run.complete and len(run.records) == 5304 and {r["status"] for r in run.records} == {"pass"}
    result = _compare_json(capsys, old, new)
    assert result["counts"] == {"regression": 0, "warning": 0, "improvement": 2, "appeared": 0,
                                "disappeared": 1, "unchanged": 5302}
    changed = {(c["kind"], c["check"]) for c in result["changes"]}
    assert changed == {("improvement", "ops/_softmax_backward_data/float32/backward"),
                       ("improvement", "ops/_softmax_backward_data/float32/forward"),
                       ("disappeared", "ops/model_step_runs_natively/minilm")}


def test_the_compiled_family_ran_compiled_on_the_h100_and_the_report_reads_it(tmp_path):
    """The compiled family's first run on a GPU: every op and model ran through torch.compile
    (at least one graph each), was judged against float64 and set beside eager; the report of
    the whole folder says, for the H100's cuda column, fit, the ops native, the numbers right,
    the optimizations that help and do not, and that the 11 + 9 controls passed."""
    rec = recorded_h100_full()
    compiled = [r for r in _by_check(rec / "compile.jsonl").values() if r["subject"].startswith("compiled.")]
    assert len(compiled) == 136 and {r["status"] for r in compiled} == {"pass"}
    assert all(r["metrics"]["graphs"] >= 1 and r["metrics"]["yardstick"] == "eager" for r in compiled)
    assert {r["metrics"]["reference"] for r in compiled} == {"float64", "cpu-float64"}
    assert Counter(r["metrics"]["more_accurate"] for r in compiled) == {"same": 119, "compiled": 11, "eager": 6}
    md = _report_of(sorted(rec.glob("*.jsonl")), tmp_path)
    lines = md.splitlines()
    column = next(i for i, x in enumerate(lines) if "**NVIDIA H100 80GB HBM3" in x and "· cuda**" in x)
    claims = [r for r in _by_check(rec / "optim.jsonl").values() if r["category"] in records.Category.CLAIM_VERDICTS]
    helping, techniques = _techniques(claims)
    assert lines[column].endswith(f"fit; ops 5,301 native; numbers right in 136 checks; {helping} of {techniques} "
                                  f"optimizations help (best: tf32 time x0.38), "
                                  f"{sum(r['category'] == 'does-not-hold' for r in claims)} claims do not hold"), lines[column]
    # docs/report.md quotes this headline and its counts: they are what the code says of this run
    doc = " ".join((ROOT / "docs" / "report.md").read_text().split())
    quoted = doc.split('The headline counts techniques and names the best: "', 1)[1].split('"', 1)[0]
    assert lines[column].endswith(quoted), quoted
    savings = sum(r["category"] == "holds" and verdict.saves(r) for r in claims)
    assert f"(the H100: {savings} savings measured on {helping} of the {techniques} techniques measured," in doc
    assert "`OK` instruments" in lines[column + 1] and "controls passed (ops, parity, optim, perf)" in lines[column + 1]


def test_a_run_of_the_controls_alone_says_so_rather_than_nothing_measured(tmp_path):
    """The controls run first on the lent machine, alone: its verdict line says that only the
    controls ran and how many passed, not that nothing was measured."""
    md = _report_of([recorded_h100_full() / "controls.jsonl"], tmp_path)
    line = next(x for x in md.splitlines() if "**NVIDIA H100 80GB HBM3" in x and "· cuda**" in x)
    assert line.endswith("only the controls ran: 11 controls passed (ops, parity, optim, perf)"), line


def test_numbers_right_counts_only_passes_and_names_the_known_limitations_and_unexpected_passes(tmp_path):
    """The 2026-11-24 parity run with its fails taken out: the card's "numbers right in N checks"
    counts the checks that passed today's judge, not the known limitations (xfail: numbers known
    to be off) nor the unexpected passes (xpass: an expectation to update), which make the card a
    warning and are named on its short line; the figures come from the records."""
    (run,) = runfiles.read_file(recorded_h100_controls() / "parity.jsonl").runs
    recs = [r for r in run.records if r["status"] != "fail"]
    parity = [r for r in recs if r.get("suite") == "parity" and r.get("target") == "cuda"
              and records.kind_of(r) != records.RecordKind.CONTROL and r["status"] != "skip"]
    counts = Counter(r["status"] for r in parity)
    assert counts["xfail"] and counts["xpass"] and counts["pass"]   # what this test is about is in the file
    [cuda] = [v for v in verdict.for_records(run.header, recs, run.end) if v.title.endswith("· cuda")]
    numerics = next(a for a in cuda.aspects if a.name == "numerics")
    assert numerics.state == verdict.WARN and cuda.state == verdict.WARN, numerics
    assert numerics.short == (f"numbers right in {counts['pass']:,} checks, {counts['xpass']:,} unexpected passes, "
                              f"{counts['xfail']:,} known limitations (xfail)"), numerics.short
    assert numerics.short in cuda.headline
    assert numerics.line.startswith(f"as right as the CPU: {counts['pass']:,} checks, none wrong; "), numerics.line
    assert f"{counts['xfail']:,} known limitations (xfail" in numerics.line, numerics.line
    assert f"{counts['xpass']:,} unexpected passes (" in numerics.line, numerics.line
    xfails = [r["check"] for r in parity if r["status"] == "xfail"]
    assert any(xfails[0] in d for d in numerics.detail), numerics.detail
    doc = " ".join((ROOT / "docs" / "report.md").read_text().split())   # quotes this short line
    assert f'("{numerics.short}": the 2026-11-24 H100 parity run without its fails)' in doc


def test_checks_an_older_judge_could_not_decide_are_kept_out_of_numbers_right_and_said_so():
    """The first H100 recording's parity run (an older judge) with its failures taken out: the
    records today's judge cannot decide from their metrics (judged again: "rerun") are neither
    right nor wrong, kept out of "numbers right" and said as undecided on the short line; the
    older judge's passes kept as they were are unconfirmed, not right either."""
    from harness.report.matrix import build
    (run,) = runfiles.read_file(H100 / "parity.jsonl").runs
    cells = [r for r in build([run]).cells.values() if r.get("target") == "cuda" and r["status"] != "skip"]
    undecided = [r for r in cells if r.get("judged_again", {}).get("outcome") == "rerun"]
    right = [r for r in cells if r["status"] == "pass" and r.get("judged_again", {}).get("outcome") != "kept"]
    kept = [r for r in cells if r["status"] in ("pass", "xpass") and r.get("judged_again", {}).get("outcome") == "kept"]
    limits = [r for r in cells if r["status"] == "xfail"]
    assert undecided and right and kept and limits
    broken = {r["check"] for r in cells if r["status"] == "fail" and r not in undecided}   # still failing today
    recs = [r for r in run.records if r["check"] not in broken]
    [cuda] = [v for v in verdict.for_records(run.header, recs, run.end) if v.title.endswith("· cuda")]
    numerics = next(a for a in cuda.aspects if a.name == "numerics")
    assert numerics.state == verdict.WARN, numerics
    assert numerics.short.endswith(
        f"numbers right in {len(right):,} checks, {len(limits):,} known limitations (xfail), {len(undecided):,} "
        f"undecided by an older judge (rerun to tell), {len(kept):,} older passes unconfirmed"), numerics.short
    assert f"{len(undecided):,} of an older judge need a rerun to tell" in numerics.line, numerics.line
    doc = " ".join((ROOT / "docs" / "report.md").read_text().split())   # quotes the undecided part
    assert f'"{len(undecided):,} undecided by an older judge (rerun to tell)"' in doc


def test_the_seed_003_path_check_is_no_optimization_and_its_failure_is_a_failure(tmp_path):
    """optim/seed_003_path_never_raises_peak_memory records a memory ratio but claims nothing
    (category n/a): it is not counted among the optimizations measured, and when it fails its
    failure is on the card (the optimizations aspect bad, the measurement named by its cause),
    not dropped as a claim's would be. The counts come from the records."""
    seed = "optim/seed_003_path_never_raises_peak_memory"
    (run,) = runfiles.read_file(recorded_h100_full() / "optim.jsonl").runs
    [seeded] = [r for r in run.records if r["check"] == seed]
    assert seeded["category"] not in records.Category.CLAIM_VERDICTS and "mem_ratio" in seeded["metrics"]
    claims = [r for r in run.records if r["category"] in records.Category.CLAIM_VERDICTS]
    helping, techniques = _techniques(claims)

    def card(recs):
        [cuda] = [v for v in verdict.for_records(run.header, recs, run.end) if v.title.endswith("· cuda")]
        return cuda, next(a for a in cuda.aspects if a.name == "optimizations")
    _, optim = card(run.records)
    assert optim.short.startswith(f"{helping} of {techniques} optimizations help ("), optim.short
    peak_rose = {**seeded, "status": "fail", "reason": "the seed-003 path raised the step's peak memory: x1.3 of the "
                                                      "plain step's; run with --optim-workload small to see it apart",
                 "metrics": {**seeded["metrics"], "mem_ratio": 1.3}}
    cuda, optim = card([peak_rose if r is seeded else r for r in run.records])
    assert optim.short.startswith(f"{helping} of {techniques} optimizations help ("), optim.short
    assert optim.state == verdict.BAD and "1 optimization measurement failed" in cuda.headline, cuda.headline
    assert any(seed in d for d in optim.detail if d.startswith("failed, ")), optim.detail
    assert "1 measurement failed: " in optim.line, optim.line
