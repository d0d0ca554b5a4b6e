"""The optimization suite: its pieces, and that it catches a sabotaged optimization."""

import pytest

from harness import claims, techniques
from harness.workloads import Setup, Workload
from tests.conftest import run_suite

SLICE = "(gradient-checkpointing-memory or adafactor-memory or fused-adamw-memory) and not trainer"


def run(tmp_path, *args, env=None):
    return run_suite(tmp_path, "suites/optim/test_claims.py", "optim and cpu", *args, env=env)


@pytest.mark.slow
def test_sabotaged_checkpointing_and_adafactor_fail_their_claims_only(tmp_path):
    baseline = tmp_path / "kept" / "baseline.jsonl"
    clean, before = run(tmp_path, "-k", SLICE, "--save-baseline", str(baseline))
    assert clean.returncode == 0, clean.stdout[-3000:]
    assert baseline.exists() and "baseline kept" in clean.stdout
    before = {r["subject"]: r for r in before}
    assert {name: r["category"] for name, r in before.items()} == {
        "gradient-checkpointing": "holds", "adafactor": "holds", "fused-adamw": "holds"}
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


def test_every_claim_has_a_runnable_pair_or_a_reason():
    for claim in claims.CLAIMS:
        assert (claim.name in techniques.PAIRS) != (claim.name in techniques.NOT_MEASURED), claim.name


def test_the_seed_003_rows_add_one_technique_each():
    rows = techniques._seed_003_rows(techniques.SCALES["small"])
    assert [name for name, _ in rows][1:] == [s.claim for s in claims.SEED_003_PATH.steps][1:]
    ga = rows[1][1]
    assert ga.micro_batch == 1 and ga.grad_accum == rows[0][1].batch
    assert rows[-1][1].seq == rows[0][1].seq // 2 and rows[-1][1].freeze_backbone


@pytest.mark.parametrize("kind,bound,ratio,verdict", [("lower", 0.62, 0.5, "holds"), ("lower", 1.0, 1.0, "does not hold"),
                                                      ("not-higher", 1.2, 1.2, "holds"),
                                                      ("not-higher", 1.2, 1.3, "does not hold")])
def test_bounds_become_measure_claims(kind, bound, ratio, verdict):
    from harness import measure
    assert measure.judge(ratio, ratio, techniques.expectation(kind, bound)) == verdict


def test_gradient_accumulation_keeps_the_samples_per_step():
    w = Workload(Setup(model="tiny", batch=4, seq=8, grad_accum=4), "cpu")
    assert len(w.batches) == 4 and all(b["input_ids"].shape == (1, 8) for b in w.batches)
    with pytest.raises(ValueError):
        Setup(batch=5, grad_accum=2).micro_batch


@pytest.mark.slow
def test_accumulation_that_forgets_to_scale_the_loss_fails_the_same_result_check(tmp_path):
    res, recs = run(tmp_path, "-k", "keeps", "-p", "tests.optim_sabotage",
                    env={"MPS_COMPAT_OPTIM_SABOTAGE": "ga-unscaled"})
    records = {r["variant"]: r for r in recs}
    assert res.returncode == 1, res.stdout[-2000:]
    assert records["gradient-accumulation"]["status"] == "fail"
    assert "gradients differ" in records["gradient-accumulation"]["reason"]
    assert {v: r["status"] for v, r in records.items() if v != "gradient-accumulation"} == {
        "gradient-checkpointing": "pass", "torch-compile": "pass", "freeze-backbone": "pass", "peft-lora": "pass"}


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


def test_memory_records_carry_the_anatomy():
    from harness import measure
    w = Workload(Setup(model="tiny", batch=2, seq=8), "cpu")
    w.step()
    anatomy = techniques._anatomy(measure, w)
    assert anatomy["optimizer_state"] > anatomy["parameters"] > 0 and anatomy["peak_bytes"] > 0
    assert techniques._anatomy(measure, Workload(Setup(model="tiny", batch=2, seq=8, grad_accum=2), "cpu")) is None


@pytest.mark.parametrize("trainable, changed, everything, ok, says", [
    (["lora_A"], ["lora_A"], ["emb", "lora_A"], True, ""),
    (["lora_A"], ["lora_A", "emb"], ["emb", "lora_A"], False, "unexpected ['emb']"),
    (["lora_A", "lora_B"], ["lora_A"], ["emb", "lora_A", "lora_B"], False, "untouched ['lora_B']"),
    (["lora_A", "emb"], ["lora_A", "emb"], ["emb", "lora_A"], False, "froze nothing"),
])
def test_the_same_result_verdict_for_trained_parameters(trainable, changed, everything, ok, says):
    verdict = techniques.same_result_verdict({"kind": "trained", "trainable": trainable, "changed": changed,
                                              "all": everything})
    assert verdict["ok"] is ok and says in verdict["message"]


def test_the_same_result_verdict_for_gradients():
    same = {"kind": "gradients", "names": ["w"], "a": [[1.0, 2.0]], "b": [[1.0, 2.0]]}
    assert techniques.same_result_verdict(same)["ok"]
    off = {**same, "b": [[1.0, 2.1]]}
    assert "gradients differ: w" in techniques.same_result_verdict(off)["message"]
    missing = {**same, "b": [None]}
    assert "w: no gradient" in techniques.same_result_verdict(missing)["message"]
    assert not techniques.same_result_verdict({**same, "names": [], "a": [], "b": []})["ok"]
