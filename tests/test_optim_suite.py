"""The optimization suite: its pieces, and that it catches a sabotaged optimization."""

import math
import tempfile

import pytest
import torch
from packaging.version import Version
from torch.utils._python_dispatch import TorchDispatchMode

from harness.core.cases import Known
from harness.env import devices
from harness.core.records import CANNOT_TELL, Category, ClaimKind
from harness.optim import claims, measure, ratios, same_result, seedpath, techniques, workloads
from harness.optim.ratios import Bound
from harness.optim.workloads import PRESETS, SCALES, Setup, Workload
from tests.conftest import dynamo_refuses, run_suite

SLICE = "(gradient-checkpointing-memory or adafactor-memory or fused-adamw-memory) and not trainer"


def run(tmp_path, *args, env=None):
    return run_suite(tmp_path, "suites/optim/test_claims.py", "optim and cpu", *args, env=env)


@pytest.mark.slow(seconds=25)
def test_sabotaged_checkpointing_and_adafactor_fail_their_claims_only(tmp_path):
    baseline = tmp_path / "kept" / "baseline.jsonl"
    clean, before = run(tmp_path, "-k", SLICE, "--save-baseline", str(baseline))
    assert clean.returncode == 0, clean.stdout[-3000:]
    assert baseline.exists() and "baseline kept" in clean.stdout
    before = {r["subject"]: r for r in before}
    assert {name: r["category"] for name, r in before.items()} == {
        "gradient-checkpointing": "holds", "adafactor": "holds", "fused-adamw": "holds"}
    for r in before.values():  # --workload auto chose the small shape on the CPU, and says why
        m = r["metrics"]
        assert m["workload"] == "small" and m["workload_reason"].startswith("auto on cpu: small")
        assert m["peak_phase_a"] in ("forward", "backward", "optimizer") and "phase" in m["peak"]
    sabotaged, after = run(tmp_path, "-k", SLICE, "-p", "tests.optim_sabotage", "--baseline", str(baseline),
                           env={"MPS_COMPAT_OPTIM_SABOTAGE": "no-checkpointing,adafactor-is-adamw"})
    # a claim that does not hold is an xfail, not a failure: only the baseline fails the session
    assert not [r for r in after if r["status"] not in ("pass", "xfail")]
    assert sabotaged.returncode == 1, sabotaged.stdout[-3000:]
    regressions = [line for line in sabotaged.stdout.splitlines() if line.startswith("optim/") and " claim " in line]
    assert sorted(line.split()[0] for line in regressions) == ["optim/adafactor/memory",
                                                               "optim/gradient-checkpointing/memory"]
    assert "FAILED: 2 regression(s)" in sabotaged.stdout
    after = {r["subject"]: r for r in after}
    assert {name: r["category"] for name, r in after.items()} == {
        "gradient-checkpointing": "does-not-hold", "adafactor": "does-not-hold", "fused-adamw": "holds"}
    # checkpointing that does nothing leaves the peak exactly where it was
    assert after["gradient-checkpointing"]["metrics"]["mem_ratio"] == 1.0
    assert after["adafactor"]["metrics"]["mem_ratio"] > before["adafactor"]["metrics"]["mem_ratio"]
    assert "does not hold" in after["adafactor"]["reason"]


def test_path_verdict_fails_where_a_row_saves_memory_by_breaking_training():
    workload = {"workload": "small", "shape": "s", "workload_reason": "r"}
    rows = [{**_path_row("baseline", 100), "loss": 0.6931}, {**_path_row("gradient-accumulation", 80), "loss": 0.7},
            {**_path_row("gradient-checkpointing", 60), "loss": "nan"}]   # as a record spells it
    verdict = seedpath.path_verdict(rows, workload)
    assert verdict.status == "fail" and verdict.message == (
        "the training step's loss is not finite at gradient-checkpointing (nan), where the baseline's is 0.6931: "
        "those rows save memory by breaking training")
    rows[2]["loss"] = 0.71
    assert seedpath.path_verdict(rows, workload).status == "pass"
    rows[0]["loss"] = float("nan")   # the baseline itself does not train: the workload's, not a row's
    assert seedpath.path_verdict(rows, workload).status == "pass"


def test_every_claim_has_a_runnable_pair_or_a_reason():
    for claim in claims.CLAIMS:
        skipped = [claims.WHERE_MEASURED[claim.name, q, claims.LOOP] for q in claims.QUANTITIES]
        assert all(k is None for k in skipped) or all(k is not None and k.outcome == "skip" for k in skipped)
        assert (claim.name in techniques.PAIRS) != (skipped[0] is not None), claim.name


def _path_row(name, peak, step_s=1.0):
    return {"row": name, "peak_bytes": peak, "step_s": step_s}


def test_path_verdict_fails_where_peak_memory_rises():
    workload = {"workload": "small", "shape": "s", "workload_reason": "r"}
    rising = [_path_row("baseline", 100), _path_row("gradient-accumulation", 80), _path_row("adafactor", 90, 2.0)]
    verdict = seedpath.path_verdict(rising, workload)
    assert (verdict.status, verdict.category) == ("fail", "n/a")
    assert verdict.message == "peak memory rose along the path: adafactor 90 B > gradient-accumulation 80 B"
    assert verdict.metrics == {"record_kind": "seed-003-path", "rows": rising, **workload, "mem_ratio": 0.9,
                               "time_ratio": 2.0}
    falling = [_path_row("baseline", 100), _path_row("gradient-accumulation", 80), _path_row("adafactor", 80, 0.5)]
    verdict = seedpath.path_verdict(falling, workload)
    assert (verdict.status, verdict.category, verdict.message) == ("pass", "n/a", "")
    assert list(verdict.metrics) == ["record_kind", "rows", "workload", "shape", "workload_reason", "mem_ratio",
                                     "time_ratio"] and verdict.metrics["mem_ratio"] == 0.8


def test_the_cases_come_from_the_claims_table():
    loop = [c for c in claims.CASES if c.entry == claims.LOOP]
    assert [c.id for c in loop] == [f"{c.name}-{q}" for c in claims.CLAIMS for q in claims.QUANTITIES]
    trainer = {(c.subject, c.variant) for c in claims.CASES if c.entry == claims.TRAINER}
    assert ("dataloader-workers", "time/trainer") in trainer and ("adafactor", "memory/trainer") in trainer
    skipped = {c.subject for c in loop if c.known is not None}
    assert skipped == {"dataloader-workers", "pin-memory", "deepspeed-zero"}
    with pytest.raises(ValueError, match="only a skip"):
        claims.ClaimCase("x", "memory", claims.LOOP, Known("limit", "why"))


def test_the_seed_003_rows_add_one_technique_each():
    rows = seedpath.seed_003_rows(workloads.SCALES["small"])
    assert [name for name, _ in rows][1:] == [s.claim for s in claims.SEED_003_PATH.steps][1:]
    ga = rows[1][1]
    assert ga.micro_batch == 1 and ga.grad_accum == rows[0][1].batch
    assert rows[-1][1].seq == rows[0][1].seq // 2 and rows[-1][1].freeze_backbone


@pytest.mark.parametrize("kind,bound,ratio,verdict", [("lower", 0.62, 0.5, "holds"), ("lower", 1.0, 1.0, "does-not-hold"),
                                                      ("not-higher", 1.2, 1.2, "holds"),
                                                      ("not-higher", 1.2, 1.3, "does-not-hold")])
def test_the_claims_bounds_are_judged_as_the_table_says(kind, bound, ratio, verdict):
    """A claims-table bound (kind, the largest ratio that holds) is what the ratio is judged by:
    lower strictly (equal bytes are no reduction), not-higher inclusively."""
    assert ratios.judge(ratio, ratio, Bound(kind, bound)) == verdict


def test_gradient_accumulation_keeps_the_samples_per_step():
    w = Workload(Setup(model="tiny", batch=4, seq=8, grad_accum=4), "cpu")
    assert len(w.batches) == 4 and all(b["input_ids"].shape == (1, 8) for b in w.batches)
    with pytest.raises(ValueError):
        Setup(batch=5, grad_accum=2).micro_batch


@pytest.mark.slow(seconds=45)
def test_accumulation_that_forgets_to_scale_the_loss_fails_the_same_result_check(tmp_path):
    res, recs = run(tmp_path, "-k", "keeps", "-p", "tests.optim_sabotage",
                    env={"MPS_COMPAT_OPTIM_SABOTAGE": "ga-unscaled"})
    records = {r["variant"]: r for r in recs}
    assert res.returncode == 1, res.stdout[-2000:]
    broken = records["gradient-accumulation"]
    assert broken["status"] == "fail" and broken["reason"].startswith("gradients differ in "), broken["reason"]
    assert broken["metrics"]["cause"] == same_result.CHANGES_THE_RESULT, broken["metrics"]
    # the terminal's verdict says what changed and the switch, not a measurement that failed
    assert "1 optimization changes the result" in res.stdout and "measurement failed" not in res.stdout, res.stdout[-3000:]
    assert same_result.SWITCH["gradient-accumulation"] in " ".join(res.stdout.split()), res.stdout[-3000:]
    refusal = dynamo_refuses("bert")   # torch 2.6 under transformers 5.24: the compiled step never runs
    assert {v: r["status"] for v, r in records.items() if v != "gradient-accumulation"} == {
        "gradient-checkpointing": "pass", "torch-compile": "fail" if refusal else "pass", "freeze-backbone": "pass",
        "peft-lora": "pass"}
    if refusal:   # said with the library that asks and the versions to change
        why = records["torch-compile"]["reason"]
        assert refusal.split(": ")[-1] in why and "upgrade torch (or downgrade it, where torch removed the name), or install a transformers release" in why, why
        assert records["torch-compile"]["metrics"]["cause"] == "version-gap: transformers", records["torch-compile"]


def test_seed_000s_cuda_amp_loop_does_nothing_without_cuda():
    """What seed 000's advice does on a machine without CUDA (a Mac): autocast and the
    GradScaler disable themselves, so the step computes exactly what float32 computes."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: torch.cuda.amp really casts")
    plain = Workload(Setup(model="tiny", batch=2, seq=8, dropout=False), "cpu")
    amp = Workload(Setup(model="tiny", batch=2, seq=8, dropout=False, autocast="cuda-amp"), "cpu")
    assert amp.scaler is not None and not amp.scaler.is_enabled()
    assert [plain.step() for _ in range(2)] == [amp.step() for _ in range(2)]


@pytest.mark.parametrize("setup", [Setup(model="tiny", batch=2, seq=8), Setup(model="tiny", batch=2, seq=8, grad_accum=2),
                                   Setup(model="tiny", batch=2, seq=8, checkpointing=True),
                                   Setup(model="tiny", batch=2, seq=8, freeze_backbone=True)],
                         ids=["plain", "accumulation", "checkpointing", "frozen"])
def test_every_measured_step_names_its_peak_phase_and_what_occupies_it(setup):
    w = Workload(setup, "cpu")
    w.step()
    m = techniques.weigh(w)
    anatomy = techniques.anatomy_of(m)
    assert anatomy["peak_phase"] in ("forward", "backward", "optimizer")
    assert sum(anatomy[k] for k in techniques.ANATOMY_KEYS) == anatomy["peak_bytes"] == m["peak_bytes"] > 0
    assert anatomy["parameters"] > 0 and anatomy["batch"] > 0
    if setup.freeze_backbone:  # the frozen backbone is weights that are not trained: filed as buffers
        assert anatomy["buffers"] > anatomy["parameters"]
    if anatomy["peak_phase"] != "forward":
        assert anatomy["gradients"] > 0 or anatomy["optimizer_state"] > 0
    assert m["allocator_peak"] is None and "no peak counter" in m["allocator_reason"]  # the CPU keeps none


def test_the_labelled_step_computes_what_the_plain_step_computes():
    plain, labelled = (Workload(Setup(model="tiny", batch=2, seq=8, dropout=False), "cpu") for _ in range(2))
    losses = [plain.step() for _ in range(2)]
    seen = [labelled.step()]

    def tracked_step(tracker):
        seen.append(labelled.step(tracker))
    m = measure.measure_memory(tracked_step, resident=labelled.resident(), labelled=True)
    assert m["peak_phase"] in ("forward", "backward", "optimizer")  # the tracker was told the phases
    assert seen == losses  # the labelled step's loss, not a copy of the plain one
    for p, q in zip(plain.model.parameters(), labelled.model.parameters()):
        assert bool((p == q).all())


def test_a_peak_in_adamws_step_is_explained_and_the_single_tensor_alternative_measured():
    """The H100's gradient-checkpointing memory ratio was exactly 1.000, both sides peaking in
    AdamW's foreach step (CUDA's default). Forced on the CPU with activations too small to
    matter, the record names the optimizer phase, says checkpointing cannot lower it, and
    measures AdamW(foreach=False) too, telling what it found there."""
    base = Setup(model="tiny", batch=2, seq=8, optimizer="adamw-foreach", dropout=False)
    wa, wb = Workload(base, "cpu"), Workload(base.but(checkpointing=True), "cpu")
    out = techniques.claim_memory(wa, wb, "peak", Bound(ClaimKind.LOWER, 0.9), "gradient-checkpointing")
    assert out["peak_phase_a"] == out["peak_phase_b"] == "optimizer"
    assert out["category"] != "holds" and out["mem_ratio"] == 1.0
    alt = out["alternative"]
    assert alt["optimizer"] == "adamw-single" and alt["peak_phase_a"] == alt["anatomy_a"]["peak_phase"]
    assert alt["anatomy_a"]["peak_bytes"] < out["anatomy_a"]["peak_bytes"]  # foreach's temporaries are gone
    assert "in the optimizer phase" in out["peak"] and "gradient-checkpointing lowers activations" in out["peak"]
    assert "AdamW's step (adamw-foreach), which gradient-checkpointing does not shrink" in out["peak"]
    assert alt["story"] in out["peak"] and f"ratio {alt['mem_ratio']:.3f}" in alt["story"]


def _side(phase, peak, **at_peak):
    return {"peak_phase": phase, "peak_bytes": peak, "at_peak": at_peak}


@pytest.mark.parametrize("alt_baseline, ratio, says", [
    (_side("backward", 100, activations=60, parameters=40), 0.7,
     "the baseline's peak moves to the backward phase and gradient-checkpointing lowers it by 30% (ratio 0.700"),
    (_side("optimizer", 100, parameters=30, gradients=30, optimizer_state=35, temporaries=5), 1.0,
     "the peak stays in the optimizer step, 95% of it the weights, gradients and optimizer state themselves, "
     "and gradient-checkpointing leaves it unchanged"),
    (_side("forward", 100, activations=90, parameters=10), 1.05, "gradient-checkpointing raises it by 5%"),
])
def test_the_alternative_is_told_by_where_its_peak_went(alt_baseline, ratio, says):
    story = techniques.alternative_story("gradient-checkpointing", "adamw", alt_baseline,
                                         {"mem_ratio": ratio, "category": "holds" if ratio < 0.9 else "does-not-hold"})
    assert says in story


def test_no_alternative_where_the_peak_is_not_in_the_optimizer_step():
    wa = Workload(Setup(model="tiny", batch=8, seq=64, dropout=False), "cpu")
    ma = {**_side("backward", 100, activations=80, parameters=20), "peak_phase": "backward"}
    assert techniques.single_tensor_alternative(wa, wa, "x", Bound(ClaimKind.LOWER, 0.5), ma, ma) is None
    other = Workload(Setup(model="tiny", batch=8, seq=64, optimizer="adafactor"), "cpu")
    opt = _side("optimizer", 100, optimizer_state=100)
    assert techniques.single_tensor_alternative(other, other, "x", Bound(ClaimKind.LOWER, 0.5), opt, opt) is None


def test_a_claim_that_holds_is_not_measured_twice():
    base = Setup(model="tiny", batch=8, seq=64, dropout=False, optimizer="adamw-single")
    out = techniques.claim_memory(Workload(base, "cpu"), Workload(base.but(seq=16), "cpu"), "peak",
                                  Bound(ClaimKind.LOWER, 0.9), "shorter-max-length")
    assert out["category"] == "holds" and "alternative" not in out
    assert "shorter-max-length lowers activations and temporaries" in out["peak"]


@pytest.mark.parametrize("trainable, changed, everything, ok, says", [
    (["lora_A"], ["lora_A"], ["emb", "lora_A"], True, ""),
    (["lora_A"], ["lora_A", "emb"], ["emb", "lora_A"], False, "unexpected ['emb']"),
    (["lora_A", "lora_B"], ["lora_A"], ["emb", "lora_A", "lora_B"], False, "untouched ['lora_B']"),
    (["lora_A", "emb"], ["lora_A", "emb"], ["emb", "lora_A"], False, "froze nothing"),
])
def test_the_same_result_verdict_for_trained_parameters(trainable, changed, everything, ok, says):
    verdict = same_result.same_result_verdict(same_result.Trained(trainable, changed, everything))
    assert (verdict.status == "pass") is ok and says in verdict.message


def test_the_same_result_verdict_for_gradients():
    same = same_result.Gradients(["w"], [[1.0, 2.0]], [[1.0, 2.0]])
    assert same_result.same_result_verdict(same, "gradient-accumulation").status == "pass"
    off = same_result.Gradients(["v", "w"], [[1.0], [1.0, 2.0]], [[1.0], [1.0, 2.1]])
    said = same_result.same_result_verdict(off, "gradient-accumulation")
    assert said.status == "fail" and said.message.startswith("gradients differ in 1 of 2 parameters (worst ")
    assert said.message.endswith(": w (margin " + f"{said.metrics['margin']:.3g})") and said.metrics["margin"] > 1
    missing = same_result.Gradients(["u", "w"], [[1.0], [1.0, 2.0]], [[1.5], None])
    said = same_result.same_result_verdict(missing, "torch-compile")
    assert said.message.startswith("gradients differ in 2 of 2 parameters (worst ") and ": w: no gradient, u (" in said.message
    nothing = same_result.same_result_verdict(same_result.Gradients([], [], []), "torch-compile")
    assert nothing.status == "fail" and nothing.cause is None   # nothing compared: no finding about the technique


@pytest.mark.parametrize("technique", same_result.TECHNIQUES)
def test_a_technique_that_changes_the_result_names_that_cause_its_meaning_and_its_switch(technique):
    """The failure groups (harness.report.verdict) read the cause, what happened and the switch
    from the record: each technique's own, never "cause not determined"."""
    if technique in same_result.SAME_GRADIENTS:
        said = same_result.same_result_verdict(same_result.Gradients(["w"], [[1.0, 2.0]], [[1.0, 3.0]]), technique)
    else:
        said = same_result.same_result_verdict(same_result.Trained(["a"], ["a", "b"], ["a", "b"]), technique)
    assert said.status == "fail" and said.cause == same_result.CHANGES_THE_RESULT
    assert said.metrics["cause_what"] == same_result.WHAT[technique] and said.metrics["switch"] == same_result.SWITCH[technique]
    assert len(set(same_result.SWITCH.values())) == len(same_result.TECHNIQUES)   # each its own


def test_seed_003_path_times_each_row_in_interleaved_rounds_against_the_baseline(monkeypatch):
    """Seed 003's table was timed with 3 repeats per row, one row after another: on 2 cores
    its gradient-accumulation row came out at 0.34x the baseline. Now the rows are timed as
    one family, every row and the baseline once per interleaved round, each row's ratio to the
    baseline with an interval from those rounds, like the claims."""
    monkeypatch.setitem(workloads.SCALES, "small", Setup(model="tiny", batch=4, seq=16))
    monkeypatch.setitem(workloads.TIME_BUDGET_S, "small", 0.5)
    rows = seedpath.seed_003_path("cpu", "small", family=(seedpath.PATH,))
    assert [r["row"] for r in rows] == [name for name, _ in seedpath.seed_003_rows(workloads.SCALES["small"])]
    # the path alone buys no rounds (its verdict is memory): every row has the baseline's rounds
    assert rows[0]["time_ratio"] == 1.0 and rows[0]["rounds"] == workloads.TIME_ROUNDS["small"]
    for r in rows[1:]:
        assert r["ci_low"] <= r["time_ratio"] <= r["ci_high"] and r["rounds"] == rows[0]["rounds"]
        assert r["vs_seed"] in ("holds", "does-not-hold", "inconclusive")
        assert r["peak_phase"] in ("forward", "backward", "optimizer")
    # 4 micro-batches of one sample each cannot be faster than one batch of four
    assert rows[1]["ci_high"] > 1.0
    table = seedpath.path_table(rows, claims.SEED_003_PATH)
    assert f"[{rows[1]['ci_low']:.2f}, {rows[1]['ci_high']:.2f}]" in table


def test_allocator_figures_are_recorded_and_a_disagreement_is_said():
    """On CUDA / MPS the allocator's own peak sits beside the tracked bytes; where it would
    give another verdict (a kernel's workspace, block rounding), the record says so."""
    tracked = {"peak_bytes": 100, "allocator_method": "cuda max_memory_allocated"}
    agree = techniques.allocator_view({**tracked, "allocator_peak": 120}, {**tracked, "allocator_peak": 60},
                                      Bound(ClaimKind.LOWER, 0.9), "holds", "peak")
    assert agree["allocator_ratio"] == 0.5 and "allocator_disagrees" not in agree
    assert (agree["allocator_peak_a"], agree["allocator_peak_b"]) == (120, 60)
    differ = techniques.allocator_view({**tracked, "allocator_peak": 120}, {**tracked, "allocator_peak": 119},
                                       Bound(ClaimKind.LOWER, 0.9), "holds", "peak")
    assert differ["allocator_disagrees"].startswith("by the allocator (cuda max_memory_allocated, its peak) the "
                                                    "claim does not hold: ratio 0.992 against holds")
    cpu = techniques.allocator_view({"allocator_peak": None, "allocator_reason": measure.CPU_NO_PEAK},
                                    {"allocator_peak": None}, Bound(ClaimKind.LOWER, 0.5), "holds", "peak")
    assert cpu["allocator_reason"] == measure.CPU_NO_PEAK and "allocator_ratio" not in cpu


def recorded_h200_sides(check: str) -> tuple[dict, dict]:
    """Both sides of a memory claim as ``weigh`` returned them, from its record in the H200's
    run (tests/fixtures/recorded/h200-torch2.11-2026-11-27): the allocator's peak and what it
    held before the step, as recorded; the tracked peak, and the resident tensors at the step's
    start (parameters, buffers, optimizer state, batch) from the record's anatomy."""
    from harness.core import runfiles
    from tests.conftest import recorded_h200
    (rec,) = [r for run in runfiles.read_file(recorded_h200() / "optim.jsonl").runs for r in run.records
              if r["check"] == check]
    m = rec["metrics"]
    sides = []
    for side in "ab":
        anatomy = m[f"anatomy_{side}"]
        sides.append({"allocator_method": m["allocator_method"], "allocator_peak": m[f"allocator_peak_{side}"],
                      "allocator_held": m[f"allocator_held_{side}"], "peak_bytes": anatomy["peak_bytes"],
                      "baseline_bytes": sum(anatomy[k] for k in ("parameters", "buffers", "optimizer_state", "batch"))})
    return sides[0], sides[1]


def test_the_allocator_is_read_by_its_rise_over_each_step_not_by_the_other_side_s_tensors():
    """On the H200 the allocator's raw peaks said gradient checkpointing lowers the peak (ratio
    0.752) where the tracked storages said it does not (1.000): the baseline's step was weighed
    while 2.4 GiB of the other side's tensors were alive. Its rise over each step on that side's
    resident tensors agrees with the tracked bytes to 0.1 MiB; a step that makes 2 GiB the
    tracker cannot see is still a disagreement."""
    bound = Bound(ClaimKind.LOWER, 1.0)
    ma, mb = recorded_h200_sides("optim/gradient-checkpointing/memory")
    assert ma["allocator_held"] - mb["allocator_held"] > 2 * 2 ** 30   # the other side's tensors, under a alone
    view = techniques.allocator_view(ma, mb, bound, "does-not-hold", "peak")
    assert "allocator_disagrees" not in view and abs(view["allocator_ratio"] - 1.0) < 1e-3, view
    assert (view["allocator_peak_a"], view["allocator_peak_b"]) == (ma["allocator_peak"], mb["allocator_peak"])
    assert all(abs(view[f"allocator_beyond_{s}"]) < 2 ** 20 for s in "ab"), view
    raw = techniques.allocator_view(*({k: v for k, v in m.items() if k != "allocator_held"} for m in (ma, mb)),
                                    bound, "does-not-hold", "peak")
    recorded_ratio = ma["allocator_peak"] and mb["allocator_peak"] / ma["allocator_peak"]   # what that run's note said
    assert raw["allocator_disagrees"].startswith("by the allocator (cuda max_memory_allocated, its peak) the claim "
                                                 f"holds: ratio {recorded_ratio:.3f}") and recorded_ratio < 0.8
    unseen = {**ma, "allocator_peak": ma["allocator_peak"] + 2 * 2 ** 30}   # the baseline's step: 2 GiB more
    found = techniques.allocator_view(unseen, mb, bound, "does-not-hold", "peak")
    assert found["allocator_beyond_a"] == 2 * 2 ** 30 + view["allocator_beyond_a"]
    assert found["allocator_disagrees"].startswith("by the allocator (cuda max_memory_allocated, its rise over each "
                                                   "step, on that side's resident tensors) the claim holds")
    frozen = {**mb, "allocator_peak": mb["allocator_held"]}   # a counter that does not move: added to the
    found = techniques.allocator_view(ma, frozen, bound, "does-not-hold", "peak")   # resident bytes, it would agree
    made = (mb["peak_bytes"] - mb["baseline_bytes"]) / 2 ** 20
    assert found["allocator_disagrees"].startswith("the allocator (cuda max_memory_allocated) saw less than the step "
                                                   "made: b's step rose by 0.0 MiB, where its tracked storages made "
                                                   f"{made:.1f} MiB"), found


def test_read_by_its_rise_the_h200_s_allocator_agrees_with_every_memory_claim():
    """Every memory claim of the H200's run whose record holds the allocator's figures: read by
    its rise over each step, the allocator gives the tracked storages' verdict, and sees at
    most 80 MiB a step beyond them (kernel workspaces, block rounding)."""
    from harness.core import runfiles
    from tests.conftest import recorded_h200
    recs = [r for run in runfiles.read_file(recorded_h200() / "optim.jsonl").runs for r in run.records
            if r["check"].endswith("/memory") and (r.get("metrics") or {}).get("allocator_held_a") is not None]
    assert len(recs) == 9
    for rec in recs:
        ma, mb = recorded_h200_sides(rec["check"])
        view = techniques.allocator_view(ma, mb, Bound(rec["metrics"]["kind"], rec["metrics"]["bound"]),
                                         rec["category"], rec["metrics"].get("basis") or "peak")
        assert "allocator_disagrees" not in view, (rec["check"], view)
        assert all(0 <= view[f"allocator_beyond_{s}"] <= 80 * 2 ** 20 for s in "ab"), (rec["check"], view)


@pytest.mark.parametrize("claim", ["gradient-checkpointing", "dynamic-padding"])
def test_a_memory_claim_through_the_trainer_names_its_peak_phase_too(monkeypatch, claim):
    """The Trainer's own loop, unchanged, told its phases through a model hook and a
    TrainerCallback: the record says where the peak is and what holds it."""
    from harness.optim import trainer_runs
    monkeypatch.setitem(workloads.SCALES, "small", Setup(model="tiny", batch=4, seq=16))
    run = trainer_runs.measure_trainer_claim(claim, "memory", "cpu", "small")
    out = run.measured
    for side in ("a", "b"):
        anatomy = out[f"anatomy_{side}"]
        assert out[f"peak_phase_{side}"] == anatomy["peak_phase"] in ("forward", "backward", "optimizer")
        assert sum(anatomy[k] for k in techniques.ANATOMY_KEYS) == anatomy["peak_bytes"] > 0
        assert anatomy["parameters"] > 0
    assert out["anatomy_a"]["activations"] > 0 or out["anatomy_a"]["peak_phase"] == "optimizer"
    assert out["bytes_a"] == out["anatomy_a"]["peak_bytes"] and f"{claim} lowers" in out["peak"]


def test_an_optimizer_state_claim_through_the_trainer_is_judged_by_the_state_and_still_names_the_peak(monkeypatch):
    from harness.optim import trainer_runs
    monkeypatch.setitem(workloads.SCALES, "small", Setup(model="tiny", batch=4, seq=16))
    run = trainer_runs.measure_trainer_claim("fused-adamw", "memory", "cpu", "small")  # "not-higher" state bytes
    out = run.measured
    assert run.basis == "optimizer-state" and run.kind == "not-higher"
    assert out["bytes_b"] == out["bytes_a"] < out["anatomy_a"]["peak_bytes"]  # state bytes, not the peak
    assert out["peak_phase_a"] in ("forward", "backward", "optimizer")


@pytest.mark.slow
def test_xdist_workers_measure_at_one_shared_workload_choice(tmp_path):
    """--workload auto probes the device once per run (a file locked between the workers):
    the records carry one choice, down to the measured matmul speed in its reason, and so
    does the end line."""
    res, records = run(tmp_path, "-n", "2", "-k", "(dynamic-padding-memory or sdpa-attention-memory) and not trainer")
    assert res.returncode == 0, res.stdout[-3000:]
    assert len(records) == 2 and len({r["nodeid"] for r in records}) == 2
    reasons = {r["metrics"]["workload_reason"] for r in records}
    assert len(reasons) == 1 and next(iter(reasons)).startswith("auto on cpu: small")
    from harness.core import runfiles
    end = runfiles.read_file(next(tmp_path.glob("run*.jsonl"))).runs[0].end
    assert end["workloads"]["cpu"]["reason"] in reasons


# --------------------------------------------------------------------------- an emulated device

class _Seen(TorchDispatchMode):
    """Counts the ops run inside a stand-in's context."""

    def __init__(self, stand_in):
        super().__init__()
        self.stand_in = stand_in

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.stand_in.ops += 1
        return func(*args, **(kwargs or {}))


class _MiniMac(devices.StandIn):
    """The least an emulated Mac is to the optimization suite: MPS's rules, a context its
    device work runs in (counted), and a memory API of its own (a peak no other backend gives)."""
    name, emulates, suites = "standin-optim-mini", "mps", ("optim",)
    PEAK, HELD = 123_456_789, 50_000_000   # HELD: what its allocator holds before a step, everything alive

    def __init__(self):
        self.ops, self.syncs = 0, 0

    def context(self):
        return _Seen(self)

    def backend(self, facts):
        return _MiniBackend(facts, self)


class _MiniBackend(devices.MPSBackend):
    def __init__(self, facts, stand_in):
        super().__init__(facts)
        self.stand_in, self.name = stand_in, stand_in.name

    def synchronize(self):
        self.stand_in.syncs += 1

    def reset_peak(self):
        return True

    def memory_peak(self):
        return _MiniMac.PEAK

    def memory_current(self):
        return _MiniMac.HELD


@pytest.fixture
def mini_mac(monkeypatch):
    mac = _MiniMac()
    monkeypatch.setitem(devices.STAND_INS, mac.name, mac)
    monkeypatch.setitem(workloads.SCALES, "small", Setup(model="tiny", batch=4, seq=16))
    monkeypatch.setitem(workloads.TIME_BUDGET_S, "small", 0.5)
    return mac


def test_an_emulated_mac_is_measured_by_mps_rules_in_its_context_with_its_memory_api(mini_mac):
    """A claim made for a Mac only (seed 000's torch.cuda.amp loop: no claim on the CPU) is
    measured on the emulating stand-in, by MPS's bound; its steps run inside the stand-in's
    context, and the allocator's peak beside the tracked bytes is the stand-in's own reading."""
    run = techniques.measure_claim("torch-cuda-amp-on-mac", "memory", mini_mac.name, "small")
    assert run.kind == "lower" and run.bound == claims.holds_bound("torch-cuda-amp-on-mac", "memory", "mps")
    assert mini_mac.ops > 0
    m = run.measured
    assert m["allocator_method"] == f"{mini_mac.name} max_memory_allocated"
    # the allocator's own figures, as it read them, with what it held before each step beside them
    assert m["allocator_peak_a"] == m["allocator_peak_b"] == _MiniMac.PEAK
    assert m["allocator_held_a"] == m["allocator_held_b"] == _MiniMac.HELD
    ops = mini_mac.ops
    timed = techniques.measure_claim("torch-cuda-amp-on-mac", "time", mini_mac.name, "small")
    assert timed.kind == "lower" and timed.rounds >= workloads.TIME_ROUNDS["small"]
    assert mini_mac.ops > ops and mini_mac.syncs >= 4 * timed.rounds   # each timed step drained before and after


@pytest.mark.slow
def test_the_seed_path_and_the_same_result_check_run_in_the_emulated_context(mini_mac):
    rows = seedpath.seed_003_path(mini_mac.name, "small")
    assert len(rows) == 6 and mini_mac.ops > 0 and mini_mac.syncs > 0
    ops = mini_mac.ops
    assert same_result.same_result_verdict(same_result.keeps_the_result("gradient-accumulation",
                                                                         mini_mac.name)).status == "pass"
    assert mini_mac.ops > ops


@pytest.mark.slow
def test_the_suite_takes_mps_branches_on_the_emulated_mac(tmp_path):
    """``--device standin-mps`` (tests/emulated_mps.py): the claims are MPS's, so seed 000's
    torch.cuda.amp advice, made for a Mac and skipped on the CPU, is measured, and 8-bit AdamW
    is kept away by MPS's gate (bitsandbytes has no MPS support) although it runs on the CPU;
    the memory claim's allocator figures are the emulated Mac's own torch.mps / torch.accelerator
    readings, where the CPU has none."""
    res, records = run_suite(tmp_path, "suites/optim/test_claims.py", "optim", "-p", "tests.standins",
                             "--device", "standin-mps", "-p", "no:xdist", "-k",
                             "(torch-cuda-amp-on-mac-memory or adamw-8bit-memory) and not trainer")
    assert res.returncode == 0, res.stdout[-3000:]
    by = {r["subject"]: r for r in records if r["subject"] != "controls"}
    assert {r["target"] for r in by.values()} == {"standin-mps"}
    assert set(by) == {"torch-cuda-amp-on-mac", "adamw-8bit"}
    eight_bit = by["adamw-8bit"]
    assert eight_bit["status"] == "skip" and "adamw-8bit on mps: bitsandbytes has no released MPS support" in (
        eight_bit["reason"])
    amp = by["torch-cuda-amp-on-mac"]
    m = amp["metrics"]
    assert amp["status"] == "xfail" and amp["category"] == "does-not-hold" and m["kind"] == "lower"
    assert m["mem_ratio"] == 1.0   # without CUDA the advice does nothing: the same bytes on both sides
    if Version(torch.__version__.split("+")[0]) < Version("2.13"):   # MPS keeps no peak before 2.13: sampled
        assert m["allocator_method"].startswith("standin-mps current_allocated_memory sampled at "), m
        return
    assert m["allocator_method"] == "standin-mps max_memory_allocated"
    # the emulated allocator counts live storages as the tracker does: what it rose by over the step
    # (its peak over what it held before) is what the step made, the peak's gradients, activations and
    # temporaries by the tracker (within 1%)
    for side in ("a", "b"):
        anatomy = m[f"anatomy_{side}"]
        made = anatomy["gradients"] + anatomy["activations"] + anatomy["temporaries"]
        rise = m[f"allocator_peak_{side}"] - m[f"allocator_held_{side}"]
        assert made > 0 and abs(rise - made) <= 0.01 * made, (side, rise, made)
    assert m["workload_reason"].startswith("auto on standin-mps: ")


# --------------------------------------------------------------------------- what the claims of one workload share

TINY = Setup(model="tiny", batch=4, seq=16)


@pytest.fixture
def fresh(monkeypatch):
    """Empty caches and the tiny workload, put back after."""
    from harness.optim import trainer_runs
    kept = (workloads.forget_built, measure.forget_weighed, seedpath.forget_timed, trainer_runs.forget_baselines)
    for forget in kept:
        forget()
    monkeypatch.setitem(workloads.SCALES, "small", TINY)
    monkeypatch.setitem(workloads.TIME_BUDGET_S, "small", 0.5)
    yield
    for forget in kept:
        forget()


@pytest.mark.parametrize("quantity", ["memory", "time"])
def test_a_technique_that_breaks_training_does_not_hold_though_it_saves(fresh, monkeypatch, quantity):
    """tests/optim_mutants.py's nan-with-checkpointing: the checkpointed step's loss (and its
    gradients) are NaN. The ratio is measured as ever; the claim does not hold, and says why,
    with both sides' losses in the record. Without the sabotage the same claim keeps finite
    losses on both sides and no such words."""
    from tests import optim_mutants
    monkeypatch.setattr(workloads.Workload, "step_without_update", workloads.Workload.step_without_update)
    clean = techniques.measure_claim("gradient-checkpointing", quantity, "cpu")
    assert all(math.isfinite(clean.measured[k]) for k in ("loss_a", "loss_b")), clean.measured
    assert "breaks training" not in techniques.claim_verdict(clean, "g").message
    for forget in (workloads.forget_built, measure.forget_weighed):
        forget()
    monkeypatch.setenv("MPS_COMPAT_OPTIM_SABOTAGE", "nan-with-checkpointing")
    run = optim_mutants.measure_claim_sabotaged("gradient-checkpointing", quantity, "cpu")
    assert math.isfinite(run.measured["loss_a"]) and math.isnan(run.measured["loss_b"]), run.measured
    verdict = techniques.claim_verdict(run, "g")
    assert verdict.category == Category.DOES_NOT_HOLD and verdict.status == "xfail", verdict
    assert "it breaks training here" in verdict.message and verdict.metrics["ratio_category"] == run.category


@pytest.mark.slow   # two Trainer claims per case: 10 s each on 2 cores
@pytest.mark.parametrize("quantity", ["memory", "time"])
def test_through_the_trainer_too_a_technique_that_breaks_training_does_not_hold(fresh, monkeypatch, quantity):
    """The Trainer's own training loss leaves NaN steps out (logging_nan_inf_filter): the claims
    read each step's loss (trainer_runs.watch_loss). nan-with-checkpointing through the
    Trainer's compute_loss: checkpointing's claim does not hold, with both losses kept."""
    from transformers import Trainer

    from harness.optim import trainer_runs
    from tests import optim_mutants
    monkeypatch.setattr(Trainer, "compute_loss", Trainer.compute_loss)   # the sabotage goes with the test
    clean = trainer_runs.measure_trainer_claim("gradient-checkpointing", quantity, "cpu", "small")
    assert all(math.isfinite(clean.measured[k]) for k in ("loss_a", "loss_b")), clean.measured
    trainer_runs.forget_baselines()
    monkeypatch.setenv("MPS_COMPAT_OPTIM_SABOTAGE", "nan-with-checkpointing")
    run = optim_mutants.measure_trainer_claim_sabotaged("gradient-checkpointing", quantity, "cpu")
    assert math.isfinite(run.measured["loss_a"]) and math.isnan(run.measured["loss_b"]), run.measured
    verdict = techniques.claim_verdict(run, "g")
    assert verdict.category == Category.DOES_NOT_HOLD and "it breaks training here" in verdict.message, verdict


def test_a_built_workload_is_kept_by_setup_target_and_torch_settings(fresh):
    import torch
    w = workloads.built(TINY, "cpu")
    assert workloads.built(TINY, "cpu") is w and workloads.built(TINY.but(seq=8), "cpu") is not w
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)   # another torch setting: another workload
        assert workloads.built(TINY, "cpu") is not w
    finally:
        torch.set_num_threads(threads)
    for seq in (2, 4, 6, 8):   # only the KEEP_BUILT last used are kept
        workloads.built(TINY.but(seq=seq), "cpu")
    assert workloads.built(TINY, "cpu") is not w


def test_a_side_two_claims_share_is_weighed_once_and_gives_what_a_fresh_measurement_gives(fresh, monkeypatch):
    """gradient-accumulation's variant is gradient-checkpointing's baseline: weighed once. The
    bytes read back are those a fresh workload weighs (storage bytes are deterministic)."""
    weighed = []
    real = measure.weigh
    monkeypatch.setattr(measure, "weigh", lambda w: weighed.append(w.setup) or real(w))
    ga = techniques.measure_claim("gradient-accumulation", "memory", "cpu", "small")
    ck = techniques.measure_claim("gradient-checkpointing", "memory", "cpu", "small")
    rows = dict(seedpath.seed_003_rows(TINY))
    # every side once (a claim that misses in AdamW's step weighs its single-tensor alternative too)
    assert len(weighed) == len(set(weighed)) and rows["gradient-accumulation"] in weighed
    assert ga.measured["bytes_b"] == ck.measured["bytes_a"]
    fresh_side = Workload(rows["gradient-accumulation"], "cpu")
    fresh_side.step()
    assert real(fresh_side)["peak_bytes"] == ck.measured["bytes_a"]


# Small enough to weigh in a blink, long enough (length 64) that an accumulated step's peak is
# in a backward pass, where one micro-batch would miss it (at length 16 the optimizer's is higher).
WEIGHED = Setup(model="tiny", batch=8, seq=64)


def _weigh_all_micro_batches(w) -> dict:
    w.step()
    return measure.measure_memory(w.step, resident=w.resident(), labelled=True)


@pytest.mark.parametrize("row", [name for name, setup in seedpath.seed_003_rows(WEIGHED)
                                 if setup.grad_accum > measure.WEIGH_MICRO_BATCHES])
def test_an_accumulated_step_weighed_over_its_first_micro_batches_weighs_what_the_whole_step_does(row):
    """``weigh`` steps through WEIGH_MICRO_BATCHES of an accumulated step's micro-batches (the
    rest stay resident): the peak bytes, its phase and what occupies it are the whole step's,
    to the byte, on every accumulated row of seed 003's path (a tiny model here; the small
    workload and the H100's large one gave the same figures). With one micro-batch they are not
    (no gradient to accumulate into yet), which is why it takes two."""
    setup = dict(seedpath.seed_003_rows(WEIGHED))[row]
    whole = _weigh_all_micro_batches(Workload(setup, "cpu"))
    w = Workload(setup, "cpu")
    w.step(micro_batches=measure.weigh_micro_batches(setup))
    shortened = measure.weigh(w)
    assert shortened["micro_batches_weighed"] == f"2 of {setup.grad_accum}"
    assert [shortened[k] for k in ("peak_bytes", "peak_phase", "at_peak")] == \
           [whole[k] for k in ("peak_bytes", "peak_phase", "at_peak")]


# The Trainer's sides whose steps accumulate micro-batches: (claim, variant side?).
ACCUMULATING_TRAINER_SIDES = [("gradient-accumulation", True), ("gradient-checkpointing", False),
                              ("gradient-checkpointing", True)]


def _trainer_weighed(name, variant, monkeypatch, first):
    """One Trainer side weighed, the tracker seeing ``first`` of each step's first micro-batches
    and its last (None: all of them)."""
    from harness.optim import trainer_runs
    monkeypatch.setattr(trainer_runs, "tracked_micro_batches", lambda trainer, dynamic: first)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_runs._trainer(name, variant, WEIGHED.but(dropout=True), "cpu", tmp)
        m = trainer_runs.weighed_train(trainer, "cpu")
    monkeypatch.undo()
    return m


@pytest.mark.parametrize("name, variant", ACCUMULATING_TRAINER_SIDES)
def test_a_trainer_step_tracked_over_its_first_and_last_micro_batches_weighs_what_the_whole_step_does(
        name, variant, monkeypatch):
    """Through the Trainer the tracker pauses between each accumulated step's first
    WEIGH_MICRO_BATCHES micro-batches and its last (trainer_runs.labelled_train): the peak,
    its phase, what occupies it and what lives after are the whole run's, to the byte, on
    every accumulating side of the Trainer's claims (8 micro-batches a step here; the small
    workload's 16 gave the same). The record says which micro-batches were seen."""
    from harness.optim import trainer_runs
    whole = _trainer_weighed(name, variant, monkeypatch, None)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_runs._trainer(name, variant, WEIGHED.but(dropout=True), "cpu", tmp)
        assert trainer_runs.tracked_micro_batches(trainer, dynamic=False) == measure.WEIGH_MICRO_BATCHES
        assert trainer_runs.tracked_micro_batches(trainer, dynamic=True) is None
        tracked = trainer_runs.weighed_train(trainer, "cpu")
    assert tracked["micro_batches_weighed"] == "3 of 8 in each step" and "micro_batches_weighed" not in whole
    keys = ("peak_bytes", "peak_phase", "at_peak", "end_bytes")
    assert [tracked[k] for k in keys] == [whole[k] for k in keys]
    assert whole["at_peak"]["batch"] > 0   # the step's other micro-batches, fetched at once, held as the batch


def test_a_trainer_step_tracked_over_one_micro_batch_would_miss_its_peak(monkeypatch):
    """The control of the test above: pausing after the first micro-batch (no gradient to
    accumulate into yet) loses the accumulated step's peak, so the comparison can fail."""
    whole = _trainer_weighed("gradient-accumulation", True, monkeypatch, None)
    one = _trainer_weighed("gradient-accumulation", True, monkeypatch, 1)
    assert one["peak_bytes"] != whole["peak_bytes"] or one["at_peak"] != whole["at_peak"]


def test_one_micro_batch_would_not_weigh_an_accumulated_step_and_dynamic_padding_is_weighed_whole():
    """The instrument's control: the shortcut is not exact by construction. One micro-batch
    misses the accumulated step's peak; a step whose micro-batches differ in width is weighed whole."""
    setup = dict(seedpath.seed_003_rows(WEIGHED))["gradient-accumulation"]
    whole = _weigh_all_micro_batches(Workload(setup, "cpu"))
    w = Workload(setup, "cpu")
    w.step(micro_batches=1)
    one = measure.measure_memory(lambda tracker: w.step(tracker, 1), resident=w.resident(), labelled=True)
    assert one["peak_bytes"] != whole["peak_bytes"]
    assert measure.weigh_micro_batches(setup.but(dynamic_padding=True)) is None
    assert measure.weigh_micro_batches(setup.but(grad_accum=1)) is None


def test_the_path_claims_are_timed_once_as_a_family(fresh, monkeypatch):
    """Two path claims and the path itself ask for one family: compare_family runs once, over
    the rows they need, and each claim reads its own pair from it."""
    calls = []
    real = ratios.compare_family
    monkeypatch.setattr(ratios, "compare_family", lambda runs, pairs, **kw: calls.append((list(runs), set(pairs)))
                        or real(runs, pairs, **kw))
    family = ("gradient-accumulation", "gradient-checkpointing", seedpath.PATH)
    ga = techniques.measure_claim("gradient-accumulation", "time", "cpu", "small", family)
    ck = techniques.measure_claim("gradient-checkpointing", "time", "cpu", "small", family)
    rows = seedpath.seed_003_path("cpu", "small", family)
    names = [name for name, _ in seedpath.seed_003_rows(TINY)]
    assert len(calls) == 1 and calls[0][0] == names   # every row: the path asks for them all
    assert {"gradient-accumulation", "gradient-checkpointing"} <= calls[0][1]
    assert "the same rounds as" in ga.measured.get("reason", "the same rounds as") and ga.rounds >= 6
    assert rows[1]["rounds"] >= 6 and ck.rounds >= 6 and ck.kind == "not-higher"
    # each member's record says where the family's seconds went, pair by pair
    account = ga.measured["family"]
    assert account == ck.measured["family"] and account["rounds"] >= 6 and account["build_s"] >= 0
    assert account["pairs"]["gradient-accumulation"]["rounds"] == ga.rounds
    assert {"gradient-accumulation", "gradient-checkpointing"} <= set(account["pairs"])
    # each member keeps its rows' losses from the family's rounds (a row that breaks training does not hold)
    assert all(math.isfinite(run.measured[k]) for run in (ga, ck) for k in ("loss_a", "loss_b")), ga.measured
    assert all(math.isfinite(row["loss"]) for row in rows), rows
    # a claim asked for alone is timed alone: its own two sides
    seedpath.forget_timed()
    techniques.measure_claim("gradient-checkpointing", "time", "cpu", "small", ("gradient-checkpointing",))
    assert calls[-1][0] == ["gradient-accumulation", "gradient-checkpointing"]


def test_the_path_reads_the_rows_its_memory_claims_weighed_without_building_them_again(fresh, monkeypatch):
    """Once the path's memory claims have weighed every row (and its family has been timed), the
    path's own check builds no workload: it reads each row's kept weighing
    (measure.weighed_setup) instead of making a model to look the figure up by (a
    macbert-large row built again for nothing was seconds each on the H100). Its rows' bytes
    are the claims' own."""
    made = []

    class Counted(workloads.Workload):
        def __init__(self, setup, device):
            made.append(setup)
            super().__init__(setup, device)
    monkeypatch.setattr(workloads, "Workload", Counted)
    claimed = {name: techniques.measure_claim(name, "memory", "cpu", "small")
               for name in ("gradient-accumulation", "gradient-checkpointing", "adafactor", "freeze-backbone",
                            "shorter-max-length")}
    seedpath.path_family_time("cpu", "small", (seedpath.PATH,))
    made.clear()
    rows = seedpath.seed_003_path("cpu", "small", ())
    assert made == []
    by_row = {row["row"]: row["peak_bytes"] for row in rows}
    for name, run in claimed.items():
        assert by_row[name] == run.measured["bytes_b"]


def test_the_path_family_claims_measure_on_every_target_without_gates():
    """The suite asks for a path claim's time by its check being selected; that holds because
    each has a time claim on every target class and no gate that could skip it."""
    for name in seedpath.FAMILY[:-1]:
        claim = claims.by_name(name)
        assert not claim.gates and all(claim.time[t].kind != ClaimKind.NONE for t in claims.TARGET_CLASSES)
        assert claim.time["cpu"].basis == "per-sample"


def test_the_trainers_baseline_is_measured_once_for_the_claims_that_share_it(fresh, monkeypatch):
    """Adafactor's and gradient accumulation's memory through the Trainer start from the same
    TrainingArguments: one baseline run, whose bytes both records carry; fused AdamW's baseline
    (optim="adamw_torch", never the default, which may be fused itself) and gradient
    checkpointing's (accumulation on) are others."""
    from harness.optim import trainer_runs
    trained = []
    real = trainer_runs.labelled_train
    monkeypatch.setattr(trainer_runs, "labelled_train", lambda t, *more: trained.append(t.args.optim) or real(t, *more))
    ada = trainer_runs.measure_trainer_claim("adafactor", "memory", "cpu", "small")
    ga = trainer_runs.measure_trainer_claim("gradient-accumulation", "memory", "cpu", "small")
    assert len(trained) == 3   # the shared baseline, then each variant
    assert ada.measured["bytes_a"] == ga.measured["bytes_a"]
    fused = trainer_runs.measure_trainer_claim("fused-adamw", "memory", "cpu", "small")
    assert len(trained) == 5 and trained[3:] == ["adamw_torch", "adamw_torch_fused"]   # its own baseline
    assert fused.measured["bytes_a"] < fused.measured["anatomy_a"]["peak_bytes"]   # fused: judged by state bytes
    trainer_runs.measure_trainer_claim("gradient-checkpointing", "memory", "cpu", "small")
    assert len(trained) == 7


def test_both_sides_of_a_trainer_memory_claim_draw_the_same_batches_whatever_ran_before(fresh, monkeypatch):
    """Dynamic padding's peak follows the longest row of each batch, and the Trainer shuffles
    with torch's global generator, seeded only when the Trainer is made: each side trains from
    the seed (trainer_runs.measured_train), so a draw from that generator between making a
    Trainer and training it changes no figure. Without the reseed it changes the variant's."""
    import torch
    from harness.optim import trainer_runs
    monkeypatch.setitem(workloads.SCALES, "small", Setup(model="tiny", batch=4, seq=32))
    first = trainer_runs.measure_trainer_claim("dynamic-padding", "memory", "cpu", "small").measured
    trainer_runs.forget_baselines()
    made = trainer_runs._trainer

    def made_then_drawn(*args):
        trainer = made(*args)
        torch.rand(1000)   # e.g. another claim's work between making and training
        return trainer
    monkeypatch.setattr(trainer_runs, "_trainer", made_then_drawn)
    again = trainer_runs.measure_trainer_claim("dynamic-padding", "memory", "cpu", "small").measured
    assert (again["bytes_a"], again["bytes_b"]) == (first["bytes_a"], first["bytes_b"])
    assert first["bytes_b"] < first["bytes_a"]   # the rows are shorter than seq: padding to them saves


def test_the_model_is_built_with_the_problem_type_its_first_forward_would_set():
    """transformers writes config.problem_type on a classifier's first forward; a compiled model
    guards on it and compiles again on its second call unless it is set when the model is
    built. It is set to what that first forward writes, so nothing computed changes."""
    from transformers import BertConfig, BertForSequenceClassification
    setup = Setup(model="tiny", batch=2, seq=8)
    fresh = BertForSequenceClassification(BertConfig(**workloads.PRESETS["tiny"], num_labels=2))
    assert fresh.config.problem_type is None
    fresh(**workloads.make_batches(setup, 1, "cpu")[0])
    assert workloads.build_model(setup).config.problem_type == fresh.config.problem_type is not None


@pytest.mark.slow
def test_a_compiled_workload_compiles_once(monkeypatch):
    """Three steps of the compiled workload capture one graph: no recompile between steps (a
    guard on something each step changes would time compiles as steps). Capture and guards
    are dynamo's, whatever backend compiles the graph: here aot_eager (AOTAutograd traces the
    forward and backward, as for inductor, whose shape guards it shares; no C++ build): about
    20 s on 2 cores, where inductor's C++ builds took 43-60 s in CI. Every step calls the
    compiled graph (``graph_calls``), on a second model of the setup too."""
    from torch._dynamo.utils import counters
    if refusal := dynamo_refuses("bert"):
        pytest.skip(f"dynamo cannot capture transformers' BERT on torch {torch.__version__}: {refusal}")
    monkeypatch.setattr(workloads, "COMPILE_BACKEND", "aot_eager")
    w = Workload(Setup(model="tiny", batch=2, seq=8, compile=True), "cpu")
    counters.clear()
    for _ in range(3):
        w.step()
    assert counters["stats"]["unique_graphs"] == 1
    assert w.graph_calls == 3   # each step called the compiled graph: it ran compiled (workloads.require_compiled)
    workloads.require_compiled(w)
    # a second model of the setup reuses the graph the first captured: it captures none of its own, and
    # still runs compiled, which only counting the graph's calls tells
    again = Workload(Setup(model="tiny", batch=2, seq=8, compile=True), "cpu")
    again.step()
    assert counters["stats"]["unique_graphs"] == 1 and again.graph_calls == 1
    workloads.require_compiled(again)


@pytest.mark.slow
def test_the_claims_run_in_one_session_with_the_other_suites(tmp_path):
    """``pytest suites/`` (and ``-m mps``) collects every suite in one session: the claims'
    family lookup read every check's ``case`` as a claim, and each claim ended in
    AttributeError ('EnvCheck' object has no attribute 'entry') beside the env suite, seen
    on the emulated Mac. ``./compat suites`` runs the optimization suite alone, so only a
    session that mixes them shows it."""
    res, records = run_suite(tmp_path, "suites/", "env or optim", "--device", "cpu", "-p", "no:xdist", "-k",
                             "test_environment_is_fit_for_target or gradient-accumulation-memory")
    by_suite = {}
    for r in records:
        by_suite.setdefault(r["suite"], []).append(r)
    assert by_suite.get("env") and by_suite.get("optim"), res.stdout[-3000:]
    claim = next(r for r in by_suite["optim"] if r["check"] == "optim/gradient-accumulation/memory")
    assert claim["category"] in ("holds", "does-not-hold", "inconclusive"), claim
    assert res.returncode == 0 and "AttributeError" not in res.stdout, res.stdout[-3000:]


# --------------------------------------------------------------------------- torch.compile: a compiled side that ran compiled

class _NoOpMode(TorchDispatchMode):
    """A dispatch mode that changes nothing: while it is on the stack Dynamo captures no graph,
    as under the emulated Mac's context."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_torch_compile_is_not_tried_on_the_emulated_mac_and_the_skip_says_why(fresh):
    """On ``standin-mps`` every step runs under the emulation's dispatch mode, where Dynamo
    captures nothing: the torch-compile time claim judged eager against eager, and the
    same-result check compared eager's gradients with themselves (margin 0, it could not fail).
    Both now stop before building anything, with the emulated device's BeyondEmulation, which
    the suite records as a skip with its reason (harness.plugin.record.Recorder.value_of)."""
    from harness.core.records import error_line
    from tests import standins  # noqa: F401  (registers the emulated Mac)
    for measured in (lambda: techniques.measure_claim("torch-compile", "time", "standin-mps", "small"),
                     lambda: same_result.keeps_the_result("torch-compile", "standin-mps")):
        with pytest.raises(devices.BeyondEmulation) as raised:
            measured()
        line = error_line(raised.value)
        assert devices.beyond_emulation(line), line
        assert "standin-mps emulates mps on this CPU" in line and "torch.compile captures no graph" in line, line
        assert "run the torch-compile checks on a Mac" in line, line


@pytest.mark.parametrize("check", ["time", "same-result"])
def test_a_compiled_side_that_ran_no_compiled_graph_is_not_judged(fresh, check):
    """Anywhere else a compiled side whose steps called no compiled graph (here a dispatch mode
    on the stack, as the emulated Mac's) is said to have run eager, with the cause and the
    switch, instead of passing on eager against eager."""
    with _NoOpMode(), pytest.raises(RuntimeError, match="torch.compile ran no compiled graph") as raised:
        if check == "time":
            techniques.measure_claim("torch-compile", "time", "cpu", "small")
        else:
            same_result.keeps_the_result("torch-compile", "cpu")
    assert isinstance(raised.value, workloads.NothingCompiled)   # a failed measurement, never a verdict
    said = str(raised.value)
    assert said.startswith("torch.compile ran no compiled graph on cpu: the compiled side's steps ran eager"), said
    assert "TorchDispatchMode" in said and "TORCHDYNAMO_DISABLE=1" in said


@pytest.mark.slow
def test_the_emulated_macs_torch_compile_checks_are_skipped_with_the_reason(tmp_path):
    """Through the suite on ``standin-mps``: the torch-compile time claim and the same-result
    check are skipped, counted as checks only a Mac answers, with the reason."""
    res, records = run_suite(tmp_path, "suites/optim/test_claims.py", "optim", "-p", "tests.standins",
                             "--device", "standin-mps", "-p", "no:xdist", "-k",
                             "(torch-compile-time and not trainer) or keeps_the_result and torch-compile")
    assert res.returncode == 0, res.stdout[-3000:]
    by = {r["check"]: r for r in records if r["subject"] != "controls"}
    assert set(by) == {"optim/torch-compile/time", "optim/optimization_keeps_the_result/torch-compile"}, set(by)
    for r in by.values():
        assert r["status"] == "skip" and r["metrics"].get(CANNOT_TELL), r
        assert "torch.compile captures no graph" in r["reason"] and "on a Mac" in r["reason"], r["reason"]


# --------------------------------------------------------------------------- fused AdamW: what it is compared with

class _Ops(TorchDispatchMode):
    """The aten ops run while it is on the stack, by name."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _adamw_ran(w: Workload) -> str:
    """Which AdamW implementation ``w``'s optimizer step ran: fused, foreach or the per-parameter loop."""
    w.step_without_update()
    with _Ops() as seen:
        w.optimizer_step()
    w.optimizer.zero_grad(set_to_none=True)
    if any("_fused_adam" in n for n in seen.names):   # fused AdamW counts its steps with a foreach op
        return "fused"
    return "foreach" if any("_foreach_" in n for n in seen.names) else "for-loop"


@pytest.mark.parametrize("where", ["cpu", "standin-mps"])
def test_fused_adamws_loop_baseline_runs_the_optimizer_the_claims_table_names(where):
    """The claims table says fused AdamW is compared with AdamW (foreach); AdamW's default is
    foreach on CUDA only (the per-parameter loop on the CPU and on MPS), so the loop forces it."""
    from tests import standins  # noqa: F401  (registers the emulated Mac)
    claim = claims.by_name("fused-adamw")
    baseline, variant = techniques.PAIRS["fused-adamw"](TINY)
    assert _adamw_ran(Workload(baseline, where)) == "foreach"
    assert _adamw_ran(Workload(variant, where)) == "fused"
    assert "foreach=True" in claim.baseline and "fused=True" in claim.variant


def test_fused_adamw_through_the_trainer_is_compared_with_adamw_torch():
    """The Trainer's baseline names its optimizer: transformers 5.x with torch >= 2.8 defaults
    to adamw_torch_fused, which made the claim fused against fused. Both sides show it."""
    from transformers import TrainingArguments

    from harness.optim import trainer_runs
    a, b = (trainer_runs.arguments("fused-adamw", variant, TINY, "cpu", tempfile.gettempdir())
            for variant in (False, True))
    assert TrainingArguments(**a).optim == "adamw_torch" and TrainingArguments(**b).optim == "adamw_torch_fused"
    assert "optim='adamw_torch'" in trainer_runs._shown(a) and "optim='adamw_torch_fused'" in trainer_runs._shown(b)


def test_a_trainer_claim_whose_sides_resolve_to_the_same_arguments_is_refused(fresh, monkeypatch):
    """A pair whose two sides resolve to the same TrainingArguments would compare a run with
    itself (ratio 1.0 whatever the technique does): refused, with why, never judged."""
    from transformers import TrainingArguments

    from harness.optim import trainer_runs
    flags = claims.trainer_kwargs
    monkeypatch.setattr(claims, "trainer_kwargs", lambda name: {})   # the variant's flags: none
    with pytest.raises(ValueError, match="resolve to the same TrainingArguments") as raised:
        trainer_runs.measure_trainer_claim("adafactor", "memory", "cpu", "small")
    assert "adafactor through the Trainer" in str(raised.value)
    monkeypatch.setattr(claims, "trainer_kwargs", flags)
    if TrainingArguments(output_dir=tempfile.gettempdir(), use_cpu=True).optim == "adamw_torch_fused":
        # the fused-adamw claim without its baseline's optimizer: the case it is there for
        monkeypatch.setattr(trainer_runs, "BASELINE_ARGS", {})
        with pytest.raises(trainer_runs.SameSides):
            trainer_runs.measure_trainer_claim("fused-adamw", "memory", "cpu", "small")


# --------------------------------------------------------------------------- float16 autocast trains with a GradScaler

@pytest.mark.parametrize("where", ["cpu", "standin-mps"])
def test_float16_autocast_trains_with_a_grad_scaler(where):
    """The fp16-autocast claim's knob is torch.autocast(float16) with torch.amp.GradScaler, as
    Trainer(fp16=True) trains; bfloat16 autocast needs none."""
    from harness.env import fitness
    from tests import standins  # noqa: F401  (registers the emulated Mac)
    if not fitness.has_feature(torch.__version__, "2.5"):
        pytest.skip(f"torch.autocast offers float16 on the CPU from torch 2.5; this is {torch.__version__}")
    assert "GradScaler" in claims.by_name("fp16-autocast").knob_torch
    w = Workload(TINY.but(autocast="float16", dropout=False), where)
    assert isinstance(w.scaler, torch.amp.GradScaler) and w.scaler.is_enabled()
    assert all(math.isfinite(w.step()) for _ in range(2)) and w.scaler.get_scale() > 0
    assert Workload(TINY.but(autocast="bfloat16"), where).scaler is None


class _Loader:
    """A trainer stand-in for trainer_runs.loading_seconds: ``get_train_dataloader`` gives
    ``batches`` that each take ``pause`` seconds to load."""

    def __init__(self, pause: float):
        import types
        self.pause = pause
        self.args = types.SimpleNamespace(max_steps=2, gradient_accumulation_steps=1)

    def get_train_dataloader(self):
        import time
        for i in range(8):
            time.sleep(self.pause)
            yield i


@pytest.mark.parametrize("held", [Category.DOES_NOT_HOLD, Category.INCONCLUSIVE])
def test_a_loading_claim_is_not_judged_where_loading_is_no_bottleneck(held):
    """The document advises workers for a loader that is the bottleneck. The suite's loader
    takes under 1 ms of a 60 ms call, so num_workers=4 read "does not hold" (x2.5 on this CPU,
    x1.31 on the H100): the workers' start-up, not preloading. A loader that is no bottleneck
    leaves the claim unjudged, saying why; one that is, or a claim that held anyway, is judged
    as measured. (Sleeps only lengthen: the shares are far on each side of the bound.)"""
    from harness.optim import trainer_runs
    found = {"median_a_s": 10.0, "category": held}
    idle = trainer_runs.loading_bottleneck(_Loader(0.0), "cpu", found)
    assert idle["category"] == Category.INCONCLUSIVE and idle["stopped"] == techniques.NOT_THE_BOTTLENECK
    assert idle["loading"]["share"] < 0.01 and idle["loading"]["call_s"] == 10.0
    heavy = trainer_runs.loading_bottleneck(_Loader(0.2), "cpu", {"median_a_s": 0.1, "category": held})
    assert "category" not in heavy and heavy["loading"]["share"] > 1, heavy
    held_anyway = trainer_runs.loading_bottleneck(_Loader(0.0), "cpu", {"median_a_s": 10.0, "category": Category.HOLDS})
    assert "category" not in held_anyway


def test_a_loading_claim_left_unjudged_says_why_and_what_to_do():
    run = techniques.ClaimRun(
        claim="dataloader-workers", quantity="time", kind=ClaimKind.LOWER, bound=1.0, claimed_ratio=1.0, source="s",
        baseline="dataloader_num_workers=0", variant="dataloader_num_workers=4", ratio=2.5, ci_low=2.4, ci_high=2.6,
        rounds=6, category=Category.INCONCLUSIVE,
        measured={"stopped": techniques.NOT_THE_BOTTLENECK, "loading": {"load_s": 0.0008, "call_s": 0.061,
                                                                      "share": 0.0131}})
    verdict = techniques.claim_verdict(run, "g")
    assert verdict.category == Category.INCONCLUSIVE and "does not hold" not in verdict.message
    assert verdict.message.startswith("not judged: the document's advice is for a loader that is the bottleneck")
    assert "0.8 ms of the call's 61 ms (1.3%" in verdict.message and "dataloader_num_workers" in verdict.message
    assert verdict.metrics["loading"]["share"] == 0.0131


def test_the_loading_claims_loader_tokenizes_each_row_when_it_is_read_and_travels_to_spawned_workers():
    """The workers' claim is measured on a loader that costs time per row, as the document's
    advice assumes: raw documents tokenized on the fly (``with_transform``), each truncated to
    the workload's width. The dataset pickles (macOS starts workers with 'spawn', which
    pickles it), and the same documents come on every machine."""
    import pickle

    from harness.optim import trainer_runs
    setup = SCALES["small"]
    data = trainer_runs.text_dataset(setup, 4)
    assert data.column_names == ["text", "labels"] and data is trainer_runs.text_dataset(setup, 4)
    row = data[0]
    vocab = PRESETS[setup.model]["vocab_size"]
    assert len(row["input_ids"]) == setup.seq and all(4 < i < vocab for i in row["input_ids"]), row
    assert row["labels"] in (0, 1) and "text" not in row
    again = pickle.loads(pickle.dumps(data))
    assert again[0]["input_ids"] == row["input_ids"]
    collate = pickle.loads(pickle.dumps(trainer_runs.collator(setup.seq)))   # spawn pickles it too
    assert collate([row, again[1]])["input_ids"].shape == (2, setup.seq)
    assert trainer_runs.words(vocab)[:3] == trainer_runs.words(vocab)[:3] and len(trainer_runs.words(vocab)) == vocab - 5


def test_the_loading_claims_arguments_keep_the_text_and_their_workers():
    """Both sides keep the text column for the transform (the Trainer drops unused columns by
    default), train one epoch of LOADING_STEPS steps per call; the variant's workers persist
    across calls (started once, in the warm-up) and the trainer reuses its one loader."""
    from harness.optim import trainer_runs
    setup = SCALES["small"]
    a, b = (trainer_runs.arguments("dataloader-workers", v, setup, "cpu", "/tmp/x") for v in (False, True))
    assert a["remove_unused_columns"] is b["remove_unused_columns"] is False
    assert a["max_steps"] == b["max_steps"] == trainer_runs.LOADING_STEPS
    assert (a["dataloader_num_workers"], b["dataloader_num_workers"], b["dataloader_persistent_workers"]) == (0, 4, True)
    assert "dataloader_persistent_workers" not in a
    other = trainer_runs.arguments("pin-memory", True, setup, "cpu", "/tmp/x")
    assert other["max_steps"] == trainer_runs.STEPS and "remove_unused_columns" not in other

    class Trainer:
        made = 0

        def get_train_dataloader(self):
            Trainer.made += 1
            return object()
    t = Trainer()
    trainer_runs.kept_loader(t)
    assert t.get_train_dataloader() is t.get_train_dataloader() and Trainer.made == 1


def test_the_workers_start_up_is_the_variants_first_call_excess_beyond_the_baselines():
    from harness.optim import trainer_runs
    found = {"warmup_a_s": [2.5], "warmup_b_s": [4.0], "median_a_s": 2.0, "median_b_s": 1.0}
    assert trainer_runs.workers_startup(found) == pytest.approx(2.5)
    assert trainer_runs.workers_startup({"median_a_s": 1.0}) is None


@pytest.mark.slow(seconds=180)
def test_workers_that_preload_nothing_fail_the_workers_claim_that_real_workers_hold(tmp_path):
    """The workers' claim on a loader whose rows also wait as reads from a slow disk do
    (tests/optim_mutants.py loader-waits: no CPU used, so workers hide it even on 2 cores,
    where the tokenizing alone is no gain: x1.08 [0.93, 1.13] on the developers' VM). Real
    workers hold the claim; workers that preload nothing (DataLoader sabotaged to load every
    batch in the main process: workers-in-main) do not. The record keeps what the loader
    costs and the workers' start-up. The suite's 8 steps a call, not fewer: with 4 (53 s a
    run, not 90, x0.79 [0.74, 0.84] alone) a clean-clone CI run beside the other xdist worker
    read x0.878 [0.823, 0.965], inconclusive within the time budget."""
    got = {}
    for sabotage in ("loader-waits", "loader-waits,workers-in-main"):
        _, recs = run(tmp_path, "-k", "dataloader-workers and time and trainer",
                      "-p", "tests.optim_sabotage", env={"MPS_COMPAT_OPTIM_SABOTAGE": sabotage})
        got[sabotage] = {r["check"]: r for r in recs}["optim/dataloader-workers/time/trainer"]
    real, broken = got["loader-waits"], got["loader-waits,workers-in-main"]
    assert real["category"] == Category.HOLDS, real["reason"]
    assert broken["category"] != Category.HOLDS and broken["metrics"]["time_ratio"] > real["metrics"]["ci_high"], \
        broken["reason"]
    for rec in (real, broken):
        loading = rec["metrics"]["loading"]
        assert loading["share"] > techniques.LOADING_BOTTLENECK and "startup_s" in loading, loading
        assert "dataloader_persistent_workers=True" in rec["metrics"]["variant"], rec["metrics"]
    assert "Loading a train() call's batches in the main process takes" in broken["reason"]


def test_a_judged_loading_claim_says_what_its_loader_costs_before_its_source():
    """A reason is cut at its end: the loader's share and the workers' start-up come right
    after the ratio, before the long source citation."""
    run = techniques.ClaimRun(
        claim="dataloader-workers", quantity="time", kind=ClaimKind.LOWER, bound=1.0, claimed_ratio=0.95,
        source="s" * 600, baseline="dataloader_num_workers=0", variant="dataloader_num_workers=4", ratio=1.08,
        ci_low=0.93, ci_high=1.13, rounds=6, category=Category.INCONCLUSIVE,
        measured={"loading": {"load_s": 1.011, "call_s": 2.2126, "share": 0.4569, "startup_s": 0.1912}})
    verdict = techniques.claim_verdict(run, "g")
    told = ("time_ratio 1.080 [0.930, 1.130] against < 1.000; Loading a train() call's batches in the main process "
            "takes 1011 ms of the call's 2213 ms (46%) here; the workers take about 0.19 s to start")
    assert told in verdict.message and verdict.message.index(told) < verdict.message.index("s" * 100)


def test_a_start_up_below_the_noise_is_not_said_as_a_negative_time():
    """The start-up is one first call against a median: where workers load nothing (the
    workers-in-main sabotage measured -0.11 s) the reason said "the workers take about -0.11 s
    to start". It now says the start-up was too short to tell apart."""
    told = techniques.loading_story({"load_s": 1.26, "call_s": 2.3, "share": 0.55, "startup_s": -0.1118,
                                     "start_method": "fork"})
    assert "-0.11" not in told and "too short to tell from the calls' own spread" in told
    assert "(started by 'fork')" in told


def test_the_workers_claims_record_says_how_the_trainer_started_its_workers(monkeypatch, tmp_path):
    """On a Mac with MPS the Trainer starts DataLoader workers with 'fork' (transformers sets
    dataloader_multiprocessing_context so from two workers on); the claim's note said they start
    with 'spawn'. The record now keeps the start method the Trainer resolved, and the reason says it."""
    import types

    import transformers.training_args as ta
    from transformers import TrainingArguments

    from harness.optim import trainer_runs
    from harness.optim.workloads import Setup
    setup = Setup(model="tiny", batch=4, seq=16)
    monkeypatch.setattr(ta, "is_torch_mps_available", lambda *a, **k: True)
    kwargs = trainer_runs.arguments("dataloader-workers", True, setup, "cpu", str(tmp_path))
    on_mac = types.SimpleNamespace(args=TrainingArguments(**kwargs))
    assert on_mac.args.dataloader_num_workers >= 2 and trainer_runs.start_method(on_mac) == "fork"
    baseline = types.SimpleNamespace(args=TrainingArguments(**trainer_runs.arguments("dataloader-workers", False, setup,
                                                                                     "cpu", str(tmp_path))))
    assert trainer_runs.start_method(baseline) is None   # no workers, nothing started
    told = techniques.loading_story({"load_s": 1.0, "call_s": 2.0, "share": 0.5, "startup_s": 0.2,
                                     "start_method": "fork"})
    assert "the workers take about 0.20 s to start (started by 'fork')" in told


@pytest.mark.slow(seconds=20)
def test_the_workers_claim_trains_with_workers_started_by_spawn_as_on_macos():
    """macOS starts DataLoader workers with 'spawn', which pickles the dataset and the collate
    function: a closure collator (this suite's, before) cannot be pickled, so the workers'
    claim could not have run on a Mac. Here the variant's trainer trains twice under spawn; the
    second call reuses the persistent workers. Two workers, not the claim's four: each spawned
    one imports torch and transformers, and pickling is the same for two (19 s on the
    developers' VM, where four took 53 s of CI's)."""
    import subprocess
    import sys
    code = ("import tempfile, torch.multiprocessing as mp\n"
            "mp.set_start_method('spawn', force=True)\n"
            "from harness.optim import trainer_runs as tr\n"
            "from harness.optim.workloads import Setup\n"
            "setup = Setup(model='tiny', batch=4, seq=16)\n"
            "with tempfile.TemporaryDirectory() as d:\n"
            "    t = tr._trainer('dataloader-workers', True, setup, 'cpu', d)\n"
            "    assert t.args.dataloader_num_workers == 4 and t.args.dataloader_persistent_workers\n"
            "    t.args.dataloader_num_workers = 2\n"
            "    t.train(); t.train()\n"
            "    print('trained', t.args.dataloader_num_workers, t.state.global_step)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "trained 2 " in done.stdout, (done.stdout[-2000:], done.stderr[-3000:])
