"""The report review's seven defects (reports/report-review.md), each reproduced and shown fixed:

1. two machines that share a host name (a cloud's VMs, all "vm") were one lineage of the
   history across torch versions: what differs between their GPUs read as a torch regression;
2. a control that failed on one target (mps) of a run of two marked the other target (cpu)
   of that run "unchecked";
3. a cut-off or -k run of the large optimization workload was made up for by a whole run of
   the small one: the card never said partial;
4. the instruments said "checked" in green beside aspects marked unchecked, "unchecked" and
   "unconfirmed" on one line, "trusted" in matrix.json for records no control vouched for, and
   the Controls section listed env-only columns as unchecked but not the ones measured without
   controls;
5. two columns whose labels differ only after 60 characters (the upgrade check's baseline and
   candidate) shared one seed-003 chart file in matrix.md;
6. "(the perf suite did not run)" under a perf section of a page that shows perf rows;
7. a --baseline of another machine read "Nothing regressed".
"""
import json

from harness.core import runfiles
from harness.core.records import Category, RecordKind, Status
from harness.env.facts import env_id
from harness.report import schema, sections, speed, verdict
from harness.report.matrix import build, version_history
from tests.conftest import load_facts, no_kernels, recorded_h100, recorded_h100_controls, recorded_h100_full, \
    recorded_h200
from tests.test_report import write_run
from tests.test_report_controls import check
from tools import report

FACTS = load_facts("linux_x86_64")


def gpu(name: str, gib: int, facts: dict = FACTS, torch: str | None = None) -> dict:
    """``facts`` on a machine with one CUDA device (and, where given, another torch)."""
    t = {**facts["torch"], "cuda_available": True, "cuda_devices": [{"name": name, "total_memory": gib * 2 ** 30}]}
    if torch:
        t["version"] = torch
    return {**facts, "torch": t, "packages": {**facts.get("packages", {}), **({"torch": torch} if torch else {})}}


def control(suite: str, name: str, status: str = Status.PASS, target: str = "cpu", reason: str = "") -> dict:
    return check(f"{suite}/controls/{name}", status, Category.CONTROL, target, reason,
                 record_kind=RecordKind.CONTROL, control=name, expected="a known answer", seen="what it gave")


def run(run_id: str, facts: dict, recs: list[dict], started: str, args=("suites/",), complete: bool = True):
    header = runfiles.header(run_id, env_id(facts), facts, pytest_args=list(args))
    header["started"] = started
    return runfiles.Run(run_id, header, "x", [{"kind": "check", "run": run_id, **r} for r in recs],
                        {"kind": "end", "run": run_id, "exitstatus": 0} if complete else None)


def card(runs, ending: str) -> verdict.Verdict:
    (found,) = [v for v in verdict.verdicts(build(runs)) if v.title.endswith(ending)]
    return found


def aspect(v: verdict.Verdict, name: str):
    return next((a for a in v.aspects if a.name == name), None)


# ----------------------------------------------------------------------------- 1. lineages


def claim(status: str, target: str = "cuda") -> dict:
    holds = status == Status.PASS
    return check("optim/larger-batch/time", status, Category.HOLDS if holds else Category.DOES_NOT_HOLD, target,
                 time_ratio=0.81 if holds else 0.99, ci_low=0.8, ci_high=1.0, bound=0.9, kind="lower")


def test_two_machines_that_share_a_host_name_are_not_one_lineage_of_torch_versions():
    """The recorded H100 and H200 both call themselves "vm": a claim that holds on one GPU and
    not on the other read "regression: worked in 2.11.0, broke in 2.11.0", and with the H200's
    torch relabelled 2.15, a plausible upgrade regression. Each machine is its own lineage; on
    one machine a torch upgrade that breaks the claim is still a regression."""
    h100, h200 = gpu("NVIDIA H100 80GB HBM3", 79, torch="2.11.0"), gpu("NVIDIA H200", 140, torch="2.11.0")
    same_torch = [run("A", h100, [claim(Status.PASS)], "2026-01-01"), run("B", h200, [claim(Status.XFAIL)], "2026-01-02")]
    assert version_history(build(same_torch)) == []
    h200_215 = gpu("NVIDIA H200", 140, torch="2.15.0")
    relabelled = [run("A", h100, [claim(Status.PASS)], "2026-01-01"), run("B", h200_215, [claim(Status.XFAIL)], "2026-01-02")]
    assert version_history(build(relabelled)) == []
    upgraded = [run("A", h100, [claim(Status.PASS)], "2026-01-01"),
                run("B", gpu("NVIDIA H100 80GB HBM3", 79, torch="2.15.0"), [claim(Status.XFAIL)], "2026-01-02")]
    (history,) = version_history(build(upgraded))
    assert history.regressions == (("2.11.0", "2.15.0"),), history
    assert "NVIDIA H100" in history.machine


def test_the_recorded_h100_and_a_flipped_h200_report_no_torch_regression(tmp_path):
    """The reviewer's reproduction: the recorded H200 run file with one claim changed to
    does-not-hold, merged with the recorded H100 (both "vm", torch 2.11.0)."""
    flipped = tmp_path / "h200flip"
    flipped.mkdir()
    for f in recorded_h200().glob("*.jsonl"):
        lines = []
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("check") == "optim/larger-batch/time" and rec.get("target") == "cuda":
                rec.update(status=Status.XFAIL, category=Category.DOES_NOT_HOLD, reason="synthetic: does not hold")
            lines.append(json.dumps(rec))
        (flipped / f.name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert report.main([str(recorded_h100_full()), str(flipped), "--out", str(out), "--kernels", no_kernels(tmp_path),
                        "--no-baseline"]) == 0
    doc = json.loads((out / "matrix.json").read_text())
    assert [h for h in doc["history"] if h["regressions"]] == []
    assert "worked in 2.11.0, broke in 2.11.0" not in (out / "matrix.md").read_text()
    assert schema.problem(doc) is None


# ----------------------------------------------------------------------------- 2. controls per target


def test_a_control_that_fails_on_one_target_leaves_the_other_targets_of_its_run_checked():
    """On a Mac, ./compat suites runs cpu and mps in one pytest run. Its mps ops control failed;
    its cpu ops controls passed, as they had in an earlier cpu run merged beside it. The cpu
    card read "unchecked: ops 5,343 native" and "no ops control ran here"."""
    older = run("R1", FACTS, [control("ops", "fallback-seen"), check("ops/add/float32", category=Category.NATIVE)],
                "2026-01-01")
    both = run("R2", FACTS, [control("ops", "fallback-seen"), check("ops/mul/float32", category=Category.NATIVE),
                             control("ops", "fallback-seen", Status.FAIL, "standin-mps-mute", "saw native"),
                             check("ops/mul/float32", category=Category.NATIVE, target="standin-mps-mute")],
               "2026-01-02", args=("suites/", "-m", "ops", "--device", "cpu,standin-mps-mute"))
    cpu = card([older, both], "· cpu")
    ops = aspect(cpu, "ops")
    assert ops.state == verdict.GOOD and "unchecked" not in ops.line and "unchecked" not in cpu.headline, ops
    assert aspect(cpu, "instruments").line == "instruments checked: 1 control passed (ops)"
    mps = card([older, both], "· standin-mps-mute")
    assert mps.state == verdict.BAD and mps.headline.startswith("instrument not trustworthy here: ops control")
    assert aspect(mps, "ops").line.startswith("unconfirmed (the ops instruments failed their controls)")
    cols = {c.target: c for c in build([older, both]).columns}
    assert cols["cpu"].instruments.state == "trusted" and cols["standin-mps-mute"].instruments.state == "untrusted"


# ----------------------------------------------------------------------------- 3. partial per workload


def optim(name: str, workload: str, ratio: float = 0.5) -> dict:
    return check(f"optim/{name}/memory", Status.PASS, Category.HOLDS, "cuda", mem_ratio=ratio, ci_low=ratio,
                 ci_high=ratio, bound=0.9, kind="lower", workload=workload)


def test_a_cut_off_k_run_of_the_large_workload_is_partial_beside_a_whole_small_run():
    """The recorded H100's large-workload optim runs were cut off (one of them -k "seed_003 or
    memory"); a whole run of the small workload beside them made the card read complete for
    optim, while matrix.json's large column said complete: false."""
    facts = gpu("NVIDIA H100 80GB HBM3", 79)
    small = run("S", facts, [optim(n, "small") for n in ("adafactor", "freeze-backbone", "lora")], "2026-01-01",
                args=("suites/", "-m", "optim and cuda"))
    large = run("L", facts, [optim("adafactor", "large")], "2026-01-02",
                args=("suites/", "-m", "optim and cuda", "-k", "seed_003 or memory"), complete=False)
    v = card([small, large], "· cuda")
    assert '-k "seed_003 or memory"' in v.partial and "cut off" in v.partial, v.partial
    # a whole run of the same workload still makes up for a narrowed one
    whole_large = run("W", facts, [optim(n, "large") for n in ("adafactor", "freeze-backbone")], "2026-01-03",
                      args=("suites/", "-m", "optim and cuda"))
    v = card([small, large, whole_large], "· cuda")
    assert "seed_003" not in v.partial and "cut off" not in v.partial, v.partial


def test_the_recorded_h100_card_says_its_large_workload_runs_were_cut_off():
    runs = [r for f in sorted(recorded_h100().glob("*.jsonl")) for r in runfiles.read_file(f).runs]
    v = card(runs, "· cuda")
    assert '-k "seed_003 or memory"' in v.partial and "cut off or interrupted" in v.partial, v.partial


# ----------------------------------------------------------------------------- 4. instruments


def measured(target: str = "cpu") -> list[dict]:
    return [check("env/threads", target=target), check("ops/add/float32", category=Category.NATIVE, target=target),
            check("parity/add/float32/forward", category=Category.PARITY, target=target, margin=0.1),
            check("optim/gradient-checkpointing/memory", category=Category.HOLDS, target=target, mem_ratio=0.5,
                  ci_low=0.5, ci_high=0.5, bound=0.62, kind="lower")]


def all_controls(target: str = "cpu", failed: tuple = ()) -> list[dict]:
    return [control(s, n, Status.FAIL if s in failed else Status.PASS, target, "saw another" if s in failed else "")
            for s, n in (("ops", "fallback-seen"), ("parity", "exact-passes"), ("optim", "memory-sees-allocation"))]


def test_instruments_are_not_checked_in_green_beside_aspects_marked_unchecked():
    """A later controls-only run passed every control; the older run's records had none (the
    recorded H100's three folders merged read "OK instruments: instruments checked: 11 controls
    passed" over "XX numerics: unchecked" and "!! optimizations: unchecked"). The instruments
    line is a warning that names what is unchecked, and how much; the aspects say how much."""
    old = run("R1", FACTS, measured(), "2026-01-01")
    checked = run("R2", FACTS, all_controls() + [check("ops/mul/float32", category=Category.NATIVE)], "2026-01-02",
                  args=("suites/", "-k", "controls or mul"))
    v = card([old, checked], "· cpu")
    inst = aspect(v, "instruments")
    assert inst.state == verdict.WARN, inst
    assert inst.line.startswith("instruments unchecked for ops, parity, optim: 1 of the 2 ops records here are from "
                                "runs in which no ops control ran; "), inst.line
    assert "instruments checked" not in inst.line
    assert aspect(v, "numerics").line.startswith("unchecked (the 1 parity record here is from a run in which no "
                                                 "parity control ran: ")
    for name in ("ops", "numerics", "optimizations"):
        a = aspect(v, name)
        assert a.state == verdict.WARN and "no " + {"ops": "ops", "numerics": "parity"}.get(name, "optim") \
            + " control ran here" not in a.line, a.line   # controls did run: in another run


def test_unchecked_and_unconfirmed_are_never_said_of_one_suite_at_once():
    """A control that failed, and an older run without controls merged in: the ops line said
    "unchecked (no ops control ran here ...): unconfirmed (the ops instruments failed their
    controls): ...", no control and a failed control on one line."""
    old = run("R1", FACTS, measured(), "2026-01-01")
    failed = run("R2", FACTS, all_controls(failed=("ops",)) + [check("ops/mul/float32", category=Category.NATIVE)],
                 "2026-01-02", args=("suites/", "-k", "controls or mul"))
    v = card([old, failed], "· cpu")
    ops = aspect(v, "ops")
    assert ops.line.startswith("unconfirmed (the ops instruments failed their controls): "), ops.line
    assert "unchecked" not in ops.line and "unchecked: unconfirmed" not in v.headline, (ops.line, v.headline)
    assert "no ops control ran" not in " ".join(a.line for a in v.aspects)
    col = next(c for c in build([old, failed]).columns if c.target == "cpu")
    assert [u["suite"] for u in col.instruments.as_json()["unchecked"]] == ["parity", "optim"]


def test_matrix_json_the_summary_and_the_controls_section_read_one_per_suite_state(tmp_path):
    """The recorded H100 folders merged: matrix.json called the cuda columns "trusted" (passed:
    11) and the summary "checked: 11 controls passed", though the small workload's records had no
    controls; the Controls section listed the env-only cpu column as without controls, and not
    the cuda ones. Now the state is unchecked with the suites named, every file says so, and the
    env-only column is in no such list."""
    files = [str(recorded_h100()), str(recorded_h100_controls()), str(recorded_h100_full())]
    out = tmp_path / "out"
    assert report.main([*files, "--out", str(out), "--kernels", no_kernels(tmp_path), "--no-baseline"]) == 0
    doc = json.loads((out / "matrix.json").read_text())
    assert schema.problem(doc) is None
    cols = {c["id"].split("/", 1)[1]: c for c in doc["columns"]}
    for cid in ("cuda", "cuda/small", "cuda/large"):
        inst = cols[cid]["instruments"]
        assert inst["state"] == "unchecked" and inst["passed"] == 11, (cid, inst)
        assert [u["suite"] for u in inst["unchecked"]] == ["parity", "optim"], inst
    assert cols["cpu"]["instruments"]["unchecked"] == []
    (cuda,) = [v for v in doc["verdicts"] if v["title"].endswith("· cuda")]
    inst = next(a for a in cuda["aspects"] if a["name"] == "instruments")
    assert inst["state"] == "warn" and inst["line"].startswith("instruments unchecked for parity, optim: ")
    md = (out / "matrix.md").read_text()
    summary = md.split("## Summary per column")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in summary.splitlines()
            if line.startswith("| vm")}
    small = next(words for label, words in rows.items() if "(small workload)" in label)
    assert small.startswith("unchecked: optim") and not small.startswith("checked"), small
    cpu = next(words for label, words in rows.items() if label.endswith(" cpu"))
    assert "unchecked" not in cpu, cpu
    listed = md.split("Without controls (instruments unchecked): ")[1].split("\n")[0]
    assert "torch 2.11.0 cuda (parity, optim)" in listed and "(small workload) (optim)" in listed, listed
    assert " cpu" not in listed and "mps" not in listed, listed


# ----------------------------------------------------------------------------- 5. chart files


SEED_ROWS = [{"row": name, "peak_bytes": peak, "step_s": step} for name, peak, step in
             (("baseline", 100, 1.0), ("gradient-accumulation", 50, 2.0), ("gradient-checkpointing", 48, 2.5),
              ("adafactor", 30, 2.4), ("freeze-backbone", 15, 1.2), ("shorter-max-length", 14, 1.0))]


def test_two_columns_whose_labels_differ_after_sixty_characters_keep_their_own_seed_003_chart(tmp_path):
    """The upgrade check's baseline and candidate: one torch, another transformers, the labels
    alike up to " · transformers X". Both sections linked one PNG, whose title named the
    candidate."""
    base = {**FACTS, "host": "a-cloud-build-machine-with-a-long-name",
            "packages": {**FACTS.get("packages", {}), "transformers": "5.23.0"}}
    cand = {**base, "packages": {**base["packages"], "transformers": "5.99.0"}}
    files = []
    for i, facts in enumerate((base, cand)):
        path = write_run(tmp_path / f"{i}.jsonl", facts, [
            {"suite": "optim", "subject": "seed-003-path", "status": "pass", "target": "cpu",
             "metrics": {"rows": SEED_ROWS, "workload": "small", "record_kind": "seed-003-path"}}], run=f"R{i}")
        files.append(str(path))
    m = build([r for f in files for r in runfiles.read_file(f).runs])
    labels = sorted(c.label for c in m.columns)
    assert sections.slug(labels[0]) == sections.slug(labels[1])   # the case: alike in their first 60 characters
    names = [s.image_name for s in sections.optim_sections(m) if s.image]
    assert len(names) == 2 and len(set(names)) == 2, names
    out = tmp_path / "out"
    assert report.main([*files, "--out", str(out), "--kernels", no_kernels(tmp_path), "--no-baseline"]) == 0
    pngs = sorted(p.name for p in out.glob("seed003_*.png"))
    md = (out / "matrix.md").read_text()
    assert len(pngs) == 2 and all(f"]({p})" in md for p in pngs), pngs


# ----------------------------------------------------------------------------- 6. perf wording


def test_a_perf_section_without_rows_does_not_say_the_perf_suite_did_not_run():
    """Speed: models listed three timed models, then "No op was timed (the perf suite did not
    run)" on the same page."""
    timed = check("perf/model-bert/train-step", category=Category.TIMED, median_s=0.01, per_second=100.0,
                  unit="samples/s", rounds=5)
    m = build([run("R1", FACTS, [timed], "2026-01-01", args=("suites/", "-m", "perf", "-k", "model"))])
    secs = speed.perf_sections(m)
    assert secs and speed.model_section(m).rows, "the perf suite ran: a model was timed"
    for section in (speed.ops_section(m), speed.memory_section(m)):
        assert not section.rows and "did not run" not in section.empty, section.empty
        assert "selected or reached" in section.empty, section.empty
    op_only = check("perf/op_time/add", category=Category.TIMED, median_s=0.001)
    m = build([run("R1", FACTS, [op_only], "2026-01-01")])
    assert "did not run" not in speed.model_section(m).empty


# ----------------------------------------------------------------------------- 7. a baseline of another machine


def test_a_baseline_of_another_machine_says_nothing_was_compared(tmp_path):
    """`tools.report runs/cpu.jsonl --baseline <the H100's ops run>` read "Nothing regressed
    against the baseline on the columns of its machine", none of the columns being of it."""
    here = write_run(tmp_path / "here.jsonl", FACTS, [
        {"suite": "ops", "subject": "add", "status": "pass", "target": "cpu", "category": "native"}])
    other = {**gpu("NVIDIA H100 80GB HBM3", 79), "host": "elsewhere"}
    base = write_run(tmp_path / "base.jsonl", other, [
        {"suite": "ops", "subject": "add", "status": "pass", "target": "cpu", "category": "native"}], run="B1")
    out = tmp_path / "out"
    assert report.main([str(here), "--baseline", str(base), "--out", str(out), "--kernels", no_kernels(tmp_path)]) == 0
    md = (out / "matrix.md").read_text()
    against = md.split("## Against the baseline")[1].split("\n## ")[0]
    assert "Nothing regressed" not in against, against
    assert "The baseline's machine (elsewhere: " in against and "nothing was compared" in against, against
    first = md.split("## Verdict per machine")[1].split("\n## ")[0]
    assert "nothing was compared" in first   # the first screen says so too
    doc = json.loads((out / "matrix.json").read_text())
    assert all(a["name"] != "against the baseline" for v in doc["verdicts"] for a in v["aspects"])


def test_the_perf_baseline_section_of_another_machine_says_nothing_was_compared():
    from harness.report import compare
    timed = check("perf/op_time/add", category=Category.TIMED, median_s=0.001)
    m = build([run("R1", FACTS, [timed], "2026-01-01")])
    other = {**FACTS, "host": "elsewhere", "cpu": {**FACTS["cpu"], "model": "Another CPU"}}
    base = compare.Side("b", env_id(other), runfiles.header("B", env_id(other), other),
                        {("perf/op_time/add", "cpu"): {**timed, "run": "B"}}, True, [])
    section = speed.baseline_section(m, base)
    assert not section.rows and "Nothing changed" not in section.empty and "Nothing was compared" in section.empty
