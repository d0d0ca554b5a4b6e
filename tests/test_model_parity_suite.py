"""Whole-model parity: a perturbed layer is caught and named; ties, divergences and drifting
loss curves are told apart; the inputs are what the seed's training script would feed."""
import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from harness.core import models, runfiles
from harness.parity.models import judge as model_judge
from harness.parity.models import runs as mp
from harness.parity.models.judge import GenerationRun, StepRun, TrainRun
from harness.parity.numerics.tolerances import TABLE, Tolerance
from tests import perturb
from tests.conftest import ROOT

OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]
PERTURBED = "bert.encoder.layer.1.output.dense.weight"


@pytest.fixture(scope="module")
def perturbed_run(tmp_path_factory):
    """One child pytest: every forward/backward check plus llama's other checks, with one
    BERT layer's gradient perturbed (tests/perturb.py)."""
    run_file = tmp_path_factory.mktemp("model-parity") / "run.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/parity/test_model_parity.py", "-m", "parity and cpu",
                          "-k", "forward_backward or llama", "-q", "-p", "no:cacheprovider", "-p", "tests.perturb",
                          "--run-file", str(run_file)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, perturb.VAR: f"bert:{PERTURBED}"})
    records = [r for run_ in runfiles.read_file(run_file).runs for r in run_.records] if run_file.exists() else []
    return res, records


@pytest.mark.slow
def test_a_perturbed_layer_fails_its_model_and_is_named_while_the_others_pass(perturbed_run):
    res, records = perturbed_run
    assert res.returncode == 1, res.stdout[-3000:]
    got = {r["variant"]: r for r in records if r["subject"] == "model_forward_backward"}
    assert set(got) == set(models.MODELS)
    bert = got.pop("bert")
    assert bert["status"] == "fail" and PERTURBED in bert["reason"]
    assert bert["metrics"]["grads_diverged"] == [PERTURBED] and bert["metrics"]["grad_worst"] == PERTURBED
    # the error is the perturbation's (1e-2 relative), not rounding; a gradient hook leaves the outputs alone
    assert bert["metrics"]["grad_worst_rel_err"] == pytest.approx(perturb.FACTOR, rel=0.01)
    assert bert["metrics"]["output_margin"] < 0.1
    assert {name: r["status"] for name, r in got.items()} == {name: "pass" for name in got}


@pytest.mark.slow
def test_records_name_the_reference_the_tolerances_and_the_worst_gradient(perturbed_run):
    _, records = perturbed_run
    llama = {r["subject"]: r for r in records if r["variant"] == "llama"}
    assert set(llama) == {"model_forward_backward", "model_training_10_steps", "model_greedy_generation"}
    assert {r["status"] for r in llama.values()} == {"pass"} and {r["category"] for r in llama.values()} == {"parity"}
    fb = llama["model_forward_backward"]["metrics"]
    assert fb["reference"] == "cpu-float64" and fb["params_compared"] == 21 and fb["grads_diverged"] == []
    assert 0 < fb["margin"] < 1 and fb["grad_worst"] and fb["tolerance_source"] and fb["grad_tolerance_source"]
    train = llama["model_training_10_steps"]["metrics"]
    assert len(train["losses"]) == len(train["reference_losses"]) == mp.STEPS and 0 <= train["margin"] < 1
    gen = llama["model_greedy_generation"]["metrics"]
    assert gen["verdict"] in ("same", "tie") and gen["comparable_steps"] > 0


def test_on_an_accelerator_the_target_is_judged_against_float64_with_the_cpu_as_the_yardstick(monkeypatch):
    """The accelerator path, run with every side on the CPU: the target and the CPU then
    compute the same float32 numbers, so they are equally far from float64 and agree exactly."""
    real_sides = mp.sides
    monkeypatch.setattr(mp, "sides", lambda target: tuple(dataclasses.replace(s, device="cpu")
                                                          for s in real_sides(target)))
    pairs = (OUTPUTS.rtol, OUTPUTS.atol), (GRADIENTS.rtol, GRADIENTS.atol)
    fb = mp.forward_backward("llama", "mps", *pairs)
    assert fb.reference == "float64" and 0 < fb.output["max_abs_err"] == fb.vs_float64["cpu"]["output_max_abs_err"]
    assert fb.vs_cpu["output_max_abs_err"] == 0 and len(fb.grads) == 21 and all(g["ok"] for g in fb.grads)
    assert fb.vs_float64["target"] == fb.vs_float64["cpu"] and not fb.diagnosis
    curves = mp.train("llama", "mps", 3).losses
    assert set(curves) == {"target", "cpu", "float64"} and curves["target"] == curves["cpu"] != curves["float64"]
    gen = mp.generate("llama", "mps", pairs[0], 4)
    assert gen.reference == "cpu" and gen.tokens == gen.reference_tokens and gen.scores["max_abs_err"] == 0


@pytest.mark.parametrize("device,fails", [("standin-oracle", False), ("standin-noisy", False),
                                          ("standin-tf32", True)])
def test_a_model_on_a_stand_in_passes_as_accurate_and_fails_in_tf32_naming_the_cause(device, fails):
    from tests import standins  # noqa: F401  registers the stand-ins
    fb = mp.forward_backward("gpt2", device, (OUTPUTS.rtol, OUTPUTS.atol), (GRADIENTS.rtol, GRADIENTS.atol))
    ok = fb.output["ok"] and fb.loss["ok"] and all(g["ok"] for g in fb.grads)
    assert ok is not fails and (fb.diagnosis.get("cause") == "tf32") is fails


# --------------------------------------------------------------------------- gradients

def _grads(**scales):
    gen = torch.Generator().manual_seed(0)
    return {name: (None if s is None else s * torch.randn(8, 8, generator=gen, dtype=torch.float64))
            for name, s in scales.items()}


def test_rounding_noise_passes_even_on_a_gradient_that_is_exactly_zero():
    exp = _grads(big=1.0, small=1e-3, zero=1e-20)  # "zero": what float64 leaves of an exactly zero gradient
    act = {name: (g * (1 + 1e-7)).float() for name, g in exp.items()}
    act["zero"] = torch.full((8, 8), 3e-8)  # float32's rounding noise where the exact value is 0
    got = model_judge.compare_gradients(act, exp, GRADIENTS)
    assert [g["ok"] for g in got["grads"]] == [True, True, True] and got["without_grad"] == []
    assert got["scale"] == pytest.approx(float(exp["big"].abs().max()))


@pytest.mark.parametrize("name,error", [("big", 1e-3), ("small", 1e-2)])
def test_a_relative_error_in_one_gradient_fails_that_gradient_only(name, error):
    exp = _grads(big=1.0, small=1e-3, other=0.5)
    act = {n: g * (1 + error) if n == name else g.clone() for n, g in exp.items()}
    got = model_judge.compare_gradients(act, exp, GRADIENTS)
    diverged = model_judge.diverged_gradients(got["grads"])
    assert [g["name"] for g in diverged] == [name] and diverged[0]["margin"] > 1
    assert diverged[0]["rel_err"] == pytest.approx(error, rel=1e-6)


def test_a_gradient_on_one_side_only_fails_and_none_on_both_is_listed():
    exp = _grads(a=1.0, lost=1.0, pooler=None)
    act = {"a": exp["a"].clone(), "lost": None, "pooler": None}
    got = model_judge.compare_gradients(act, exp, GRADIENTS)
    assert got["without_grad"] == ["pooler"]
    assert [(g["name"], g["reason"]) for g in model_judge.diverged_gradients(got["grads"])] == [
        ("lost", "no gradient on the target side")]


def test_a_nan_in_a_gradient_is_never_excused_as_as_accurate_as_the_cpu():
    """measure_accuracy lets a gradient within ACCURACY_FACTOR x the CPU's error pass; the
    error skips NaN elements, so a NaN where float64 and the CPU have numbers would pass too
    (its other elements are exact) unless the judge counts it."""
    exp = _grads(w=1.0)
    cpu = {"w": (exp["w"] * (1 + 1e-3)).float()}       # the CPU far off: a generous yardstick
    nan = exp["w"].float().clone()
    nan[0, 0] = float("nan")
    step = {"output": torch.ones(2), "loss": torch.tensor(0.5)}
    ref = {"output": torch.ones(2, dtype=torch.float64), "loss": torch.tensor(0.5, dtype=torch.float64), "grads": exp}
    judged = model_judge.measure_accuracy({"target": {**step, "grads": {"w": nan}}, "cpu": {**step, "grads": cpu},
                                           "float64": ref}, OUTPUTS, GRADIENTS)
    assert not judged["grads"][0]["ok"], judged["grads"]
    near = {"w": (exp["w"] * (1 + 1e-3)).float()}    # as far off as the CPU, no NaN: excused
    assert model_judge.measure_accuracy({"target": {**step, "grads": near}, "cpu": {**step, "grads": cpu},
                                         "float64": ref}, OUTPUTS, GRADIENTS)["grads"][0]["ok"]


# --------------------------------------------------------------------------- generation

def _side(scores):
    scores = torch.tensor(scores, dtype=torch.float32).unsqueeze(0)  # one row
    return {"tokens": scores.argmax(-1), "scores": scores}


def _generation(target, reference, new_tokens: int = 3) -> GenerationRun:
    """A GenerationRun of two sides' scores (one row), judged at the model tolerance."""
    return GenerationRun("m", "cpu", "float64", new_tokens,
                         **model_judge.generation_record(_side(target), _side(reference), (OUTPUTS.rtol, OUTPUTS.atol)))


REF = [[5.0, 1.0, 0.0], [2.0, 2.00001, 0.0], [0.0, 3.0, 1.0]]


def test_tokens_that_part_where_the_reference_was_tied_are_a_tie():
    target = [[5.0, 1.0, 0.0], [2.00002, 2.00001, 0.0], [9.0, 0.0, 0.0]]  # picks 0 where ref picks 1 by 1e-5
    record = _generation(target, REF)
    verdict = model_judge.judge_generation(record, OUTPUTS)
    assert verdict["verdict"] == "tie" and (verdict["row"], verdict["step"]) == (0, 1)
    assert verdict["gap"] == pytest.approx(1e-5, rel=0.1) and verdict["gap"] <= verdict["allowed_gap"]


def test_tokens_that_part_where_the_reference_had_a_clear_lead_diverge():
    ref = [[5.0, 1.0, 0.0], [2.0, 2.5, 0.0], [0.0, 3.0, 1.0]]
    target = [[5.0, 1.0, 0.0], [2.6, 2.5, 0.0], [0.0, 3.0, 1.0]]
    record = _generation(target, ref)
    verdict = model_judge.judge_generation(record, OUTPUTS)
    assert verdict["verdict"] == "diverged" and verdict["step"] == 1 and verdict["gap"] == pytest.approx(0.5)
    # the scores are compared only where both sides had the same prefix: steps 0 and 1
    assert verdict["comparable_steps"] == 2 and not record.scores["ok"]


def test_identical_tokens_are_the_same_and_near_ties_are_counted():
    record = _generation(REF, REF)
    verdict = model_judge.judge_generation(record, OUTPUTS)
    assert verdict["verdict"] == "same" and verdict["step"] is None
    assert verdict["near_ties"] == 1 and verdict["closest"] == pytest.approx(1e-5, rel=0.1)


# --------------------------------------------------------------------------- training

TOL = Tolerance(1e-4, 1e-4, "test")


def test_a_loss_curve_within_the_linear_bound_passes():
    ref = [6.0 - 0.1 * k for k in range(10)]
    losses = [x * (1 + 0.5 * (k + 1) * TOL.rtol) for k, x in enumerate(ref)]  # half the allowance, every step
    verdict = model_judge.judge_training(losses, ref, TOL)
    assert verdict["ok"] and verdict["margin"] == pytest.approx(0.5)
    assert verdict["bound"] == pytest.approx([(k + 1) * 1e-4 for k in range(10)])


def test_a_loss_curve_that_drifts_geometrically_fails_where_it_crosses_the_bound():
    ref = [6.0] * 10
    losses = [6.0 * (1 + 1e-5 * 2 ** k) for k in range(10)]  # doubles each step: 1e-5 ... 5.1e-3
    verdict = model_judge.judge_training(losses, ref, TOL)
    assert not verdict["ok"] and verdict["over_steps"] == [7, 8, 9] and verdict["worst_step"] == 9
    assert verdict["max_divergence"] == pytest.approx(5.12e-3, rel=1e-6)


# --------------------------------------------------------------------------- verdicts

FORWARD_BACKWARD_METRICS = {
    "max_abs_err", "max_rel_err", "margin", "reference", "output", "output_margin", "loss", "loss_reference",
    "loss_abs_err", "loss_margin", "grad_worst", "grad_worst_max_abs_err", "grad_worst_rel_err", "grad_worst_scale",
    "grad_margin", "grad_scale", "params_compared", "params_without_grad", "grads_diverged", "rtol", "atol",
    "tolerance_source", "grad_rtol", "grad_atol", "grad_tolerance_source"}


def _forward_backward_result(error: float = 0.0, **diagnosis) -> StepRun:
    """A CPU target's forward_backward result: float32 against float64, with one gradient
    ("layer.weight") off by ``error`` relative."""
    exp_grads = _grads(**{"head.weight": 1.0, "layer.weight": 0.5})
    expected = {"output": torch.linspace(-1, 1, 16, dtype=torch.float64),
                "loss": torch.tensor(2.0, dtype=torch.float64), "grads": exp_grads}
    actual = {"output": expected["output"].float(), "loss": expected["loss"].float(),
              "grads": {n: (g * (1 + error) if n == "layer.weight" else g).float() for n, g in exp_grads.items()}}
    return StepRun("m", "cpu", "float64", "logits", **model_judge.measure(actual, expected, OUTPUTS, GRADIENTS),
                   diagnosis=diagnosis)


def test_the_forward_backward_verdict_passes_within_tolerance_and_names_the_diverged_gradient():
    passed = model_judge.judge_forward_backward(_forward_backward_result(), OUTPUTS, GRADIENTS)
    assert (passed.status, passed.category, passed.message) == ("pass", "parity", "")
    assert set(passed.metrics) == FORWARD_BACKWARD_METRICS and passed.metrics["grads_diverged"] == []
    failed = model_judge.judge_forward_backward(_forward_backward_result(1e-2), OUTPUTS, GRADIENTS)
    assert (failed.status, failed.category, failed.cause) == ("fail", "parity", None)
    assert failed.message.startswith("gradients diverged (worst first): layer.weight (margin ")
    assert "relative error 0.01" in failed.message and "harness/parity/numerics/tolerances.py" in failed.message
    assert failed.metrics["grads_diverged"] == ["layer.weight"] and set(failed.metrics) == FORWARD_BACKWARD_METRICS


def test_a_failing_verdict_says_what_differs_then_the_diagnosed_cause_and_its_switch():
    from harness.core import records
    from harness.parity.numerics import causes
    diagnosed = causes.describe("tf32", "cuda", "float32")
    failed = model_judge.judge_forward_backward(_forward_backward_result(1e-2, **diagnosed), OUTPUTS, GRADIENTS)
    assert failed.status == "fail" and failed.cause == "tf32"
    assert failed.message.startswith("gradients diverged"), failed.message
    assert failed.message.endswith(f"; {diagnosed['cause_what']}; {diagnosed['switch']}"), failed.message
    assert {k: failed.metrics[k] for k in diagnosed} == diagnosed
    # the longest cause's words fill a reason's length: what differs must still be in the record
    nan = causes.describe("non-finite", "cuda", "float16")
    failed = model_judge.judge_forward_backward(_forward_backward_result(1e-2, **nan), OUTPUTS, GRADIENTS)
    kept = records.first_line(failed.message)
    assert kept.startswith("gradients diverged") and len(kept) <= records.REASON_MAX, kept


def test_the_training_verdict_passes_a_linear_drift_and_fails_a_geometric_one():
    ref = [6.0] * 10
    run = TrainRun("m", "cpu", "float64", 1e-3, 10, [], {"float64": ref, "target": [x * (1 + 1e-5) for x in ref]})
    passed = model_judge.judge_training_run(run, TOL)
    assert (passed.status, passed.category) == ("pass", "parity") and passed.metrics["steps"] == 10
    drifting = dataclasses.replace(run, losses={"float64": ref, "target": [6.0 * (1 + 1e-5 * 2 ** k) for k in range(10)]})
    failed = model_judge.judge_training_run(drifting, TOL)
    assert (failed.status, failed.category) == ("fail", "parity")
    assert failed.message.startswith("loss curves diverged past the bound at steps [7, 8, 9]: divergence 0.00512")
    assert set(failed.metrics) == set(passed.metrics) == {
        "max_divergence", "margin", "divergence", "bound", "worst_step", "losses", "reference_losses", "lr",
        "steps", "rtol", "atol", "tolerance_source"}


def test_the_generation_verdict_passes_a_tie_with_a_note_and_fails_a_clear_divergence():
    tied = [[5.0, 1.0, 0.0], [2.00002, 2.00001, 0.0], [9.0, 0.0, 0.0]]
    run = _generation(tied, REF)
    passed = model_judge.judge_generation_run(run, OUTPUTS)
    assert (passed.status, passed.metrics["verdict"]) == ("pass", "tie") and "a tie" in passed.metrics["note"]
    ref, target = [[5.0, 1.0, 0.0], [2.0, 2.5, 0.0]], [[5.0, 1.0, 0.0], [2.5, 2.5001, 0.0]]
    run = _generation(target, ref, new_tokens=2)
    failed = model_judge.judge_generation_run(run, OUTPUTS)
    assert (failed.status, failed.category, failed.metrics["verdict"]) == ("fail", "parity", "same")
    assert failed.message.startswith("scores out of tolerance before the tokens parted")
    lead = [[5.0, 1.0, 0.0], [2.0, 2.5, 0.0], [0.0, 3.0, 1.0]]
    target = [[5.0, 1.0, 0.0], [2.6, 2.5, 0.0], [0.0, 3.0, 1.0]]
    run = _generation(target, lead)
    run.scores = {**run.scores, "ok": True}  # the token rule alone
    diverged = model_judge.judge_generation_run(run, OUTPUTS)
    assert diverged.status == "fail" and diverged.message.startswith("tokens diverged at step 1 (row 0)")


# --------------------------------------------------------------------------- inputs

def test_the_dataset_is_tokenised_in_memory_like_minilms_own_batch():
    data = mp.dataset()
    assert data.cache_files == [] and len(data) == len(mp.SENTENCES)
    first = data[:mp.BATCH]
    assert torch.equal(first["input_ids"], models.minilm_batch()["input_ids"])
    assert first["input_ids"].shape == (mp.BATCH, mp.MAX_LENGTH)


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5", "minilm"])
def test_model_batches_fold_ids_into_the_tiny_vocabularies_and_label_each_head(name):
    data = mp.dataset()
    model = models.MODELS[name].make()
    rows = data[:mp.BATCH]
    batch = mp.model_batch(name, model, rows)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert int(ids.max()) < model.config.vocab_size
    assert torch.equal(ids == 0, rows["input_ids"] == 0) and torch.equal(ids[:, 0], rows["input_ids"][:, 0])
    labels = batch.get("labels")
    if name == "bert":
        assert torch.equal(labels, rows["label"])
    elif name == "gpt2":
        assert torch.equal(labels == -100, mask == 0)
    elif name == "t5":
        assert labels.shape == (mp.BATCH, models.TARGET_SEQ)
    else:  # the pretrained model keeps the tokenizer's ids; its loss comes from models.minilm_loss
        assert labels is None and torch.equal(ids, rows["input_ids"])


def test_training_batches_are_seeded_and_every_side_runs_float32_against_its_reference():
    rows = mp.training_rows(mp.STEPS)
    assert rows == mp.training_rows(mp.STEPS) and len(rows) == mp.STEPS
    assert [s.name for s in mp.sides("cpu")] == ["target", "float64"] and mp.reference_of("cpu") == "float64"
    assert [(s.name, s.device, s.dtype) for s in mp.sides("mps")] == [
        ("target", "mps", "float32"), ("cpu", "cpu", "float32"), ("float64", "cpu", "float64")]
    assert mp.reference_of("mps") == "cpu"
