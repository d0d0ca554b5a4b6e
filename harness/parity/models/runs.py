"""Whole-model parity: does training on the target give the numbers training on the CPU gives?

Three measurements per model of ``harness.core.models.MODELS``, each a plain function that the
sandbox child runs and that returns plain data (floats, strings, lists):

  forward_backward  the output (logits, or hidden states), the loss and every parameter's
                    gradient after one backward pass
  train             the loss curve of ``STEPS`` AdamW steps over the same seeded batches
  generate          greedy generation (the decoders): the tokens, and how far apart the
                    reference's top two candidates were wherever the tokens part

Sides. The target runs the model in float32 from the same initial weights as every other
side. Its reference is the CPU in float32 when the target is an accelerator (the user's
question: the numbers the CPU gives), and the CPU in float64 when the target is the CPU
itself: float32 on the CPU against the same weights in float64 measures the rounding a
float32 run carries, which is what makes the suite meaningful without an accelerator. On
an accelerator both float32 sides are also measured against float64, so a report can say
which of the two is the more accurate.

The inputs are prepared as a user's training script prepares them: a ``datasets.Dataset`` of
short sentences, tokenised by ``map(..., batched=True)`` with the MiniLM tokenizer (BERT
WordPiece), padded to ``MAX_LENGTH``, ``set_format("torch")``. Every side of a check reads
the same rows: the forward/backward check and greedy generation the first ``BATCH``, the
training check a seeded draw per step (``training_rows``).

Every model runs in ``eval()`` mode, also while it trains: train-mode dropout draws from
each device's own random stream, so two devices would drop different units and nothing
would be comparable. ``eval()`` changes nothing else in these models (no batch norm) and
gradients flow as in ``train()``.

How the sides are compared, what each run returns (StepRun, TrainRun, GenerationRun) and
the verdict the test takes in the pytest process, is harness.parity.models.judge.

The same machinery serves the other whole-model runs (harness.parity.models.inputs,
precision, references): a side may compute under ``torch.autocast`` (``Side.autocast``,
``autocast_of``), ``step`` and ``greedy`` take any batch, ``compare_steps`` and
``compare_generations`` judge a target against float64 in any precision, and ``diagnose``
names a cause, "non-finite" first: NaN or inf where float64 has a number fails with that
cause on every target, the CPU included.
"""
from __future__ import annotations

import copy
import dataclasses
import math

from harness.core import models
from harness.env import devices
from harness.parity.models import judge
from harness.parity.models.judge import GenerationRun, StepRun, TrainRun

STEPS = 10                # AdamW steps in the training check
# AdamW learning rates. The config-built models start from random weights: 1e-3 moves them.
# The pretrained MiniLM is fine-tuned at transformers' TrainingArguments default, 5e-5: at
# 1e-3 its loss jumped about (0.28 to 1.1 within 10 steps) and that chaos amplified float32's
# rounding (5e-4 from float64 by step 7, against about 1e-6 at 5e-5), which says nothing
# about a device.
LR = 1e-3
FINE_TUNE_LR = 5e-5
NEW_TOKENS = 16           # greedy generation length
DECODERS = ("gpt2", "t5", "llama")


def learning_rate(name: str) -> float:
    """The AdamW learning rate of the training check for model ``name`` (see LR)."""
    return FINE_TUNE_LR if models.MODELS[name].pretrained else LR


@dataclasses.dataclass(frozen=True)
class Side:
    """One run of the model: where, and in which precision. ``autocast``: a half dtype
    ("float16", "bfloat16") the run computes in under ``torch.autocast`` (the model's
    weights stay in ``dtype``), or "" for none (harness.parity.models.precision)."""
    name: str     # "target" | "cpu" | "float64" (or what a check compares: "eager", "no-cache")
    device: str
    dtype: str
    autocast: str = ""
    perturb: tuple = ()   # (half dtype, draw): every weight moved at random (gradient_sensitivity)


def sides(target: str) -> tuple[Side, ...]:
    """The runs a check needs: the target, the CPU in float32 (accelerators only), float64."""
    cpu = () if target == "cpu" else (Side("cpu", "cpu", "float32"),)
    return (Side("target", target, "float32"), *cpu, Side("float64", "cpu", "float64"))


def reference_of(target: str) -> str:
    """The side greedy generation is judged against (see the module docstring): tokens are
    compared with the CPU's on an accelerator. Outputs, gradients and loss curves are
    judged against float64 on every target (``forward_backward``, ``train``)."""
    return "float64" if target == "cpu" else "cpu"


def _rounded(tree, dtype: str = "float32"):
    """float64 tensors (and Python floats) as ``dtype`` holds them: what the most accurate
    ``dtype`` computation gives."""
    import torch
    from torch.utils import _pytree
    dt = getattr(torch, dtype)

    def leaf(x):
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
            return x.to(dt)
        if isinstance(x, float):
            return float(torch.tensor(x, dtype=torch.float64).to(dt))
        return x
    return _pytree.tree_map(leaf, tree)


def _in_dtypes_of(tree, like):
    """``tree``'s tensors, each in the dtype of the tensor in the same place of ``like`` (a
    float32 run rounded as an autocast run of the same step holds its results); ``tree`` as it
    is where the two are not alike."""
    import torch
    from torch.utils import _pytree
    leaves, spec = _pytree.tree_flatten(tree)
    shape_of_like = _pytree.tree_flatten(like)
    if spec != shape_of_like[1]:
        return tree
    return _pytree.tree_unflatten([x.to(y.dtype) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                                   and x.is_floating_point() and y.is_floating_point() else x
                                   for x, y in zip(leaves, shape_of_like[0])], spec)


def runs_on(target: str, compute, of: tuple[Side, ...] | None = None) -> dict:
    """``compute(side)`` for every side of ``target`` (``of``, by default ``sides(target)``;
    the target's first in it, computed last). A stand-in target (harness.env.devices.StandIn)
    runs it on the CPU, given the CPU's result and float64's, rounded to float32."""
    of = of or sides(target)
    out = {side.name: reference(compute, side) if side.name == "float64" else compute(side)
           for side in of if side.name != "target"}
    stand_in = devices.stand_in(target)
    if stand_in is None:
        out["target"] = compute(of[0])
    else:
        out["target"] = stand_in.run(lambda: compute(dataclasses.replace(of[0], device=devices.place(target))),
                                     out.get("cpu"),
                                     _rounded(out["float64"]) if "float64" in out else None)
    return out


def reference(compute, side: Side) -> dict:
    """The float64 side's run; where it raises, a RuntimeError saying so first
    (models.REFERENCE_FAILED: the record's cause is then the reference's, not the target's)."""
    from harness.core import errors
    try:
        return compute(side)
    except Exception as exc:
        raise RuntimeError(f"{models.REFERENCE_FAILED}: {errors.one_line(exc)}") from exc


def on_target(target: str, compute, cpu=None, reference=None):
    """``compute(device)`` on ``target``: on the device itself, or, for a stand-in, on the CPU
    as the stand-in computes (given the CPU's result and the rounded reference where a check
    has them; the checks that compare two runs on the target have neither)."""
    stand_in = devices.stand_in(target)
    if stand_in is None:
        return compute(target)
    return stand_in.run(lambda: compute(devices.place(target)), cpu, reference)


def diagnose(target: str, rerun, dtype: str = "float32", non_finite: int = 0, weights: bool = False) -> dict:
    """The cause of a target's failure (harness.parity.numerics.causes): ``rerun(trial)`` reruns
    the target side for "nondeterministic" (True when its result differs and passes) and "tf32"
    (True when it passes with TF32 off), and answers None for a trial it cannot make.

    ``non_finite``: how many numbers the target gave as NaN or inf where float64 has one. Any
    is the cause "non-finite", on every target, the CPU included, and before any rerun: a NaN
    is never a precision limit, whatever float32 does. Otherwise the CPU target has no cause
    to find (its failure is judged by the tolerance alone): an empty dict.

    A model computes in a half ``dtype`` under torch.autocast, or (``weights``) with its weights
    in that dtype (harness.parity.models.precision): the switch is autocast's or the half
    weights' (causes.switch_for), not "use autocast" or "compute it in float32" of one op."""
    from harness.parity.numerics import causes
    kind = devices.rules_of(target)   # the emulated Mac's causes are MPS's (its fallback, no TF32)
    autocast = dtype in ("float16", "bfloat16") and not weights
    if non_finite:
        return causes.describe("non-finite", kind, dtype, autocast, weights)
    if kind == "cpu":
        return {}
    return causes.describe(causes.diagnose(kind, dtype, rerun), kind, dtype, autocast, weights)


def in_half_weights(side: Side) -> bool:
    """Whether a side's model holds its weights in a half dtype (no autocast: everything computes in it)."""
    return side.dtype in ("float16", "bfloat16") and not side.autocast


def in_float32(side: Side) -> Side:
    """The same side in float32 throughout: no autocast, float32 weights (the reduced-precision rerun)."""
    return dataclasses.replace(side, autocast="", dtype="float32")


def autocast_of(side: Side):
    """The context a side computes in: ``torch.autocast`` on its device in its half dtype, or none."""
    import contextlib

    import torch
    if not side.autocast:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(side.device).type, dtype=getattr(torch, side.autocast))


def _tensors(actual: dict, reference: dict, keys, cpu: dict | None = None):
    """(actual, reference, cpu) per compared tensor: ``keys`` and every gradient both sides have
    (and the CPU's, where ``cpu`` is given)."""
    for k in keys:
        if k in actual and k in reference and (cpu is None or k in cpu):
            yield actual[k], reference[k], cpu[k] if cpu is not None else None
    for name, ref in (reference.get("grads") or {}).items():
        got = (actual.get("grads") or {}).get(name)
        on_cpu = (cpu.get("grads") or {}).get(name) if cpu is not None else None
        if got is not None and ref is not None and (cpu is None or on_cpu is not None):
            yield got, ref, on_cpu


def non_finite(actual: dict, reference: dict, keys=("output", "loss")) -> int:
    """NaN or inf in a side's tensors (``keys`` and, where present, every gradient) where
    float64's are numbers (harness.parity.numerics.accuracy.non_finite)."""
    from harness.parity.numerics import accuracy
    return sum(accuracy.non_finite(got, ref) for got, ref, _ in _tensors(actual, reference, keys))


def non_finite_on_cpu(runs: dict, keys=("output", "loss")) -> int | None:
    """Of the target's ``non_finite`` numbers, how many the CPU's run in the same precision gives
    as NaN or inf too (harness.parity.numerics.accuracy.non_finite_shared); None where there is
    no CPU run to ask (the CPU target itself)."""
    from harness.parity.numerics import accuracy
    if "cpu" not in runs:
        return None
    return sum(accuracy.non_finite_shared(got, cpu, ref)
               for got, ref, cpu in _tensors(runs["target"], runs["float64"], keys, runs["cpu"]))


# --------------------------------------------------------------------------- the inputs

MAX_LENGTH = models.SEQ   # tokens per sentence after padding / truncation
BATCH = 4                 # sentences per batch
DATA_SEED = 0             # which rows make each training batch
PROMPT_TOKENS = 6         # decoder-only prompts: the first tokens of each sentence, unpadded

# (sentence, label); label 1 when the sentence is about an animal (BERT's classification
# target). The first four are MiniLM's pairs in models.minilm_batch order, so the batch the
# forward/backward check uses gives the pretrained model its own similarity loss, meaning intact.
SENTENCES = (
    ("A man is playing a guitar.", 0),
    ("The cat sleeps on the sofa.", 1),
    ("Someone plays an instrument.", 0),
    ("Stock prices fell sharply today.", 0),
    ("A dog runs across the park.", 1),
    ("The train leaves at noon.", 0),
    ("Birds sing in the early morning.", 1),
    ("She reads a book by the window.", 0),
    ("The horse jumped over the fence.", 1),
    ("Rain is expected this weekend.", 0),
    ("A fish swims in the clear lake.", 1),
    ("He cooks dinner for his friends.", 0),
)


def dataset():
    """SENTENCES as a tokenised ``datasets.Dataset`` in torch format, built in memory.

    ``keep_in_memory`` and a fixed fingerprint: no cache file is written (a fresh clone
    stays clean) and the tokenizer is not hashed to name one.
    """
    from datasets import Dataset
    tokenizer = models.minilm_tokenizer()

    def tokenize(rows):
        return tokenizer(rows["text"], padding="max_length", truncation=True, max_length=MAX_LENGTH)

    data = Dataset.from_dict({"text": [s for s, _ in SENTENCES], "label": [label for _, label in SENTENCES]})
    data = data.map(tokenize, batched=True, keep_in_memory=True, new_fingerprint="model-parity-minilm-tokenized")
    data.set_format("torch", columns=["input_ids", "attention_mask", "label"])
    return data


def training_rows(steps: int, seed: int = DATA_SEED) -> list[list[int]]:
    """Which dataset rows make each training batch: a seeded draw per step, the same on every side."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    return [torch.randperm(len(SENTENCES), generator=gen)[:BATCH].tolist() for _ in range(steps)]


def model_batch(name: str, model, rows: dict) -> dict:
    """Forward keyword arguments for model ``name`` from tokenised rows (labels included).

    The tiny models have a 512-token vocabulary and the tokenizer's ids go up to 30521, so
    the ids are folded in (``id % vocab_size``) rather than the models rebuilt with a 30522
    vocabulary: they stay the registry's models (the weights the op audit runs) and small.
    [PAD] 0, [CLS] 101 and [SEP] 102 are below 512 and stay themselves; word ids that
    collide after folding are harmless, since parity needs the same tokens on every side,
    not meaningful ones. The pretrained MiniLM gets the ids as tokenised.
    """
    spec = models.MODELS[name]
    ids, mask = rows["input_ids"], rows["attention_mask"]
    if not spec.pretrained:
        ids = ids % model.config.vocab_size
    batch = {"input_ids": ids, "attention_mask": mask}
    if spec.loss_fn is not None:  # MiniLM: the loss comes from the registry's loss function
        return batch
    if type(model).__name__.endswith("ForSequenceClassification"):
        batch["labels"] = rows["label"]
    elif model.config.is_encoder_decoder:  # T5: learn to copy the sentence's first tokens
        batch["labels"] = ids[:, :models.TARGET_SEQ].masked_fill(mask[:, :models.TARGET_SEQ] == 0, -100)
    else:  # causal LM: the inputs themselves, padding ignored
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    return batch


def prompts(name: str, model, rows: dict) -> dict:
    """Generation inputs: an encoder-decoder reads whole sentences (padding masked); a
    decoder-only model continues the first PROMPT_TOKENS tokens (no padding, so no
    left-padding question arises)."""
    batch = model_batch(name, model, rows)
    batch.pop("labels", None)
    if not model.config.is_encoder_decoder:
        batch = {k: v[:, :PROMPT_TOKENS] for k, v in batch.items()}
    return batch


# --------------------------------------------------------------------------- runs

def place(model, side: Side):
    """The model of one side: moved to its device and dtype, in eval mode (no dropout).

    Every side's model passes through here, so a self-test can wrap it to alter one side.
    """
    import torch
    model = model.to(device=side.device, dtype=getattr(torch, side.dtype)).eval()
    if side.perturb:
        dtype, draw = side.perturb
        size = SENSITIVITY_UNITS * HALF_ROUNDING[dtype]
        gen = torch.Generator().manual_seed(SENSITIVITY_SEED + draw)
        with torch.no_grad():
            for p in model.parameters():
                noise = 2 * torch.rand(p.shape, generator=gen, dtype=torch.float64) - 1
                p.mul_((1 + size * noise).to(device=p.device, dtype=p.dtype))
    return model


def on_device(batch: dict, device: str) -> dict:
    """A batch's tensors moved to ``device`` (every side's batch goes through here)."""
    return {k: v.to(device) for k, v in batch.items()}


def _main_output(output):
    """The output a user reads: logits, or the last hidden state of a bare encoder."""
    logits = getattr(output, "logits", None)
    return ("logits", logits) if logits is not None else ("last_hidden_state", output.last_hidden_state)


def step(name: str, base, batch_of, side: Side, real_of=None, backward: bool = True) -> dict:
    """One forward and backward pass on one side, under the side's autocast; tensors brought
    back to the CPU. ``batch_of(model)`` makes the forward's keyword arguments;
    ``real_of(model, batch)``, where given, the mask of the output elements that mean
    something (harness.parity.models.inputs.real_positions): the output is those elements.
    ``backward=False``: inference, the forward alone under ``torch.no_grad()`` (no gradients)."""
    import contextlib

    import torch
    model = place(copy.deepcopy(base), side)
    batch = on_device(batch_of(model), side.device)
    with autocast_of(side), (contextlib.nullcontext() if backward else torch.no_grad()):
        output = model(**batch)
        loss = models.loss_of(output, batch, models.MODELS[name].loss_fn, model)
    if backward:
        loss.backward()
    out_name, out = _main_output(output)
    real = real_of(model, batch) if real_of is not None else None
    if real is not None:
        out = out[real]
    grads = {n: (p.grad.detach().cpu() if p.grad is not None else None) for n, p in model.named_parameters()
             } if backward else {}
    return {"output_name": out_name, "output": out.detach().cpu(), "loss": loss.detach().cpu(), "grads": grads}


def _step(name: str, base, rows: dict, side: Side) -> dict:
    """One forward and backward pass on one side over dataset rows."""
    return step(name, base, lambda model: model_batch(name, model, rows), side)


def step_passed(result: StepRun) -> bool:
    """Whether a step's output, loss and every gradient met the rule (before non-finite is asked)."""
    return result.output["ok"] and result.loss["ok"] and all(g["ok"] for g in result.grads)


def compare_steps(name: str, target: str, step_of, out_tol, grad_tol, of: tuple[Side, ...] | None = None,
                  dtype: str = "float32") -> StepRun:
    """``step_of(side)`` on every side of ``of`` (default ``sides(target)``), the target judged
    against float64: on the CPU target by the tolerances, on an accelerator by its accuracy
    with the CPU's run in the same precision as the yardstick (``judge.measure_accuracy``;
    where the CPU has no such run, by the tolerances). ``dtype``: the precision the target
    computes in, "float32" or an autocast half dtype; in half precision outputs and loss
    compare normwise (an error relative to the output's largest value, the rule for a result
    against a wider reference: harness.parity.numerics.accuracy). A failure gets its cause
    (``diagnose``); NaN or inf where float64 has a number is counted in ``non_finite``."""
    out_tol, grad_tol = judge.as_tolerance(out_tol), judge.as_tolerance(grad_tol)
    half = dtype != "float32"
    first = (of or sides(target))[0]
    runs = runs_on(target, step_of, of)
    named = {"model": name, "target": target, "reference": "float64", "output_name": runs["target"]["output_name"],
             "dtype": dtype, "non_finite": non_finite(runs["target"], runs["float64"])}
    if named["non_finite"] and target != "cpu":
        named["non_finite_on_cpu"] = non_finite_on_cpu(runs)
    if target == "cpu" or "cpu" not in runs:
        result = StepRun(**named, **judge.measure(runs["target"], runs["float64"], out_tol, grad_tol, normwise=half))
    else:
        def against(side: str, reference: str) -> dict:
            return judge.side_summary(judge.measure(runs[side], runs[reference], out_tol, grad_tol, normwise=half))
        result = StepRun(**named, **judge.measure_accuracy(runs, out_tol, grad_tol, dtype, normwise=half),
                         vs_cpu=against("target", "cpu"),
                         vs_float64={s: against(s, "float64") for s in ("target", "cpu")})
    moved: list[dict] = []   # float64's own movement (gradient_sensitivity), measured once where a gradient misses

    def excuse(grads: list, target_run: dict) -> list[str]:
        if not half or all(g["ok"] for g in grads):
            return []
        if not moved:
            moved.append(gradient_sensitivity(step_of, runs["float64"], dtype))
        return excuse_sensitive(grads, target_run, runs["float64"], moved[0])
    excused = excuse(result.grads, runs["target"])
    if excused:
        result.setting = {**(result.setting or {}), "within_reference_sensitivity": excused,
                          "sensitivity": f"float64 with every weight moved by up to {SENSITIVITY_UNITS} units of "
                                         f"{dtype}'s rounding, {SENSITIVITY_DRAWS} draws"}
    if "cpu" in runs and target != "cpu" and step_passed(result) and not result.non_finite:
        result.cpu_finding = judge.cpu_finding(runs, out_tol, grad_tol, normwise=half)
    if not step_passed(result) or result.non_finite:
        def passes(again: dict) -> bool:   # judged as the first run was
            judged = (judge.measure(again["target"], again["float64"], out_tol, grad_tol, normwise=half)
                      if "cpu" not in runs else judge.measure_accuracy(again, out_tol, grad_tol, dtype, normwise=half))
            excuse(judged["grads"], again["target"])
            return judged["output"]["ok"] and judged["loss"]["ok"] and all(g["ok"] for g in judged["grads"])

        def rerun(trial: str):
            import torch
            if trial == "nondeterministic":   # other bits that pass: the first order was unlucky
                again = runs_on(target, step_of, of)["target"]
                return any(not torch.equal(again[k], runs["target"][k]) for k in ("output", "loss")) and passes(
                    {**runs, "target": again})
            if trial == "tf32" and "cpu" in runs:
                with devices.tf32(False):
                    again = {**runs, "target": runs_on(target, step_of, of)["target"]}
                return passes(again)
            if trial == "reduced-precision" and half and "cpu" in runs:
                # the same step on the target without autocast (float32 throughout), each
                # tensor rounded to the dtype the autocast run gave it: what the device would
                # give if only its half-precision arithmetic were the CPU's
                full = runs_on(target, step_of, (in_float32(first),))["target"]
                if not passes({**runs, "target": _in_dtypes_of(full, runs["target"])}):
                    return False
                return _within_half_precision(result, runs, dtype)
            return None
        result.diagnosis = diagnose(target, rerun, dtype, result.non_finite, in_half_weights(first))
    return result


# --------------------------------------------------------------------------- the reference's own sensitivity

# A gradient behind a gate (ReLU, a mask's edge) moves by a whole gate's share when rounding
# flips one, so its error under autocast depends on where the weights' draw put the gates,
# not on the device: T5's encoder FFN wi gradient in float16 on the CPU missed float64 by
# 0.23 to 6.8 of the table's tolerance over eight seeds of the same model (the registry's
# seed 0 at 0.23 with transformers 5.24, 2.19 with 4.57, whose initialisation draws other
# weights). Where a half-precision gradient misses its tolerance, float64 is run again with
# every weight moved at random by up to SENSITIVITY_UNITS of the half dtype's rounding, in
# SENSITIVITY_DRAWS draws; the gradient passes (rule "within-reference-sensitivity") when its
# error is within the tolerance plus the most float64's own gradient moved. Measured on the
# CPU at 4 units: each of those eight T5 seeds explained (at 1 unit, 7 of 8), while BERT's,
# GPT-2's and Llama's gradients move by at most 0.29 of their tolerance, so the rule widens
# them by that much and no more. Output and loss are never excused so.
HALF_ROUNDING = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}   # unit roundoff
SENSITIVITY_UNITS = 4
SENSITIVITY_DRAWS = 4
SENSITIVITY_SEED = 20261207


def gradient_sensitivity(step_of, reference: dict, dtype: str) -> dict[str, float]:
    """Per parameter, the largest absolute change of float64's gradient (``reference``, the
    float64 side's step) over SENSITIVITY_DRAWS runs with the weights perturbed (``place``)."""
    moved: dict[str, float] = {}
    for draw in range(1, SENSITIVITY_DRAWS + 1):
        got = step_of(Side("float64", "cpu", "float64", perturb=(dtype, draw)))
        for name, grad in got["grads"].items():
            ref = reference["grads"].get(name)
            if grad is None or ref is None or not grad.numel():
                continue
            moved[name] = max(moved.get(name, 0.0), float((grad - ref).abs().max()))
    return moved


def excuse_sensitive(grads: list[dict], target: dict, reference: dict, moved: dict[str, float]) -> list[str]:
    """Mark the gradient entries (``judge.compare_gradients``) that miss their tolerance by
    no more than float64's own movement (``gradient_sensitivity``) as passing, rule
    "within-reference-sensitivity"; NaN or inf is never excused. The names excused."""
    from harness.parity.numerics import accuracy
    excused = []
    for g in grads:
        err = g["max_abs_err"]
        if g["ok"] or not math.isfinite(err) or not math.isfinite(g["margin"]) or g["margin"] <= 0:
            continue
        if accuracy.non_finite(target["grads"].get(g["name"]), reference["grads"].get(g["name"])):
            continue
        allowed = err / g["margin"] + moved.get(g["name"], 0.0)
        if err <= allowed:
            g.update(ok=True, margin=err / allowed, rule="within-reference-sensitivity", reason="",
                     reference_moved=moved[g["name"]], tolerance_margin=g["margin"])
            excused.append(g["name"])
    return excused


def _within_half_precision(result: StepRun, runs: dict, dtype: str):
    """Where the same step without autocast meets float64: whether the autocast step's miss
    is one half precision reaches (True) or the half-precision kernel's own
    (causes.HALF_KERNEL), judged on the items that missed (output, loss, gradients) against
    the CPU's autocast error on each (causes.half_precision_explains)."""
    from harness.parity.numerics import causes
    sides = [runs["target"], runs["cpu"], runs["float64"]]
    triples = [tuple(side[key] for side in sides) for key in ("output", "loss") if not getattr(result, key)["ok"]]
    for g in result.grads:
        got = [(side.get("grads") or {}).get(g["name"]) for side in sides]
        if not g["ok"] and all(x is not None for x in got):
            triples.append(tuple(got))
    return causes.half_precision_explains(dtype, causes.tensor_misses(triples))


def forward_backward(name: str, target: str, out_tol, grad_tol) -> StepRun:
    """Output, loss and gradients of ``name`` on ``target`` against float64.

    ``out_tol`` and ``grad_tol`` are (rtol, atol) pairs from the test's tolerance table:
    outputs compare elementwise, gradients normwise (``judge.compare_gradients``). The
    batch is the dataset's first BATCH rows. On an accelerator each item passes when it
    meets the tolerance against float64 or is no less accurate than the CPU in float32
    (``judge.measure_accuracy``); ``vs_float64`` holds both float32 sides measured
    against float64, ``vs_cpu`` the target against the CPU (agreement, recorded, not
    judged), and a failure its cause (``diagnose``).
    """
    base, rows = models.MODELS[name].make(), dataset()[:BATCH]

    def step_of(side):
        return _step(name, base, rows, side)
    return compare_steps(name, target, step_of, out_tol, grad_tol)


def _losses(name: str, base, data, batches: list[list[int]], side: Side) -> list[float]:
    """Train a copy of ``base`` on one side: the loss before each AdamW step.

    A pretrained model is fine-tuned with its input embedding table frozen, a common
    fine-tuning choice and here a matter of time: MiniLM's table is 11.7M of its 22.7M
    parameters, and AdamW over it tripled the check's time on a 2-core CPU. Its gradient
    is still compared, in ``forward_backward``.
    """
    import torch
    model = place(copy.deepcopy(base), side)
    if models.MODELS[name].pretrained:
        model.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate(name))
    losses = []
    for rows in batches:
        batch = on_device(model_batch(name, model, data[rows]), side.device)
        loss = models.loss_of(model(**batch), batch, models.MODELS[name].loss_fn, model)
        losses.append(loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return losses


def curve_non_finite(losses: list[float], reference: list[float], cpu: list[float] | None = None) -> int:
    """Losses that are NaN or inf where float64's is a number (with ``cpu``: of those, the steps
    whose loss the CPU's curve has as NaN or inf too)."""
    return sum(1 for i, (a, b) in enumerate(zip(losses, reference)) if not math.isfinite(a) and math.isfinite(b)
               and (cpu is None or (i < len(cpu) and not math.isfinite(cpu[i]))))


def curve_non_finite_on_cpu(target: str, curves: dict) -> int | None:
    """``curve_non_finite``'s steps the CPU's curve shares, on an accelerator with a CPU curve."""
    if target == "cpu" or "cpu" not in curves:
        return None
    return curve_non_finite(curves["target"], curves["float64"], curves["cpu"])


def train(name: str, target: str, steps: int = STEPS, tol=None) -> TrainRun:
    """The loss curves of ``steps`` AdamW steps on every side, from the same weights and
    batches. The target's curve is judged against float64's (``judge.judge_training``,
    with the CPU's curve as the yardstick on an accelerator); with ``tol`` (rtol, atol), a
    target that fails has its cause diagnosed here, where it can be rerun."""
    base, data = models.MODELS[name].make(), dataset()
    batches = training_rows(steps)

    def curve(side):
        return _losses(name, base, data, batches, side)
    curves = runs_on(target, curve)
    result = TrainRun(name, target, "float64", learning_rate(name), steps, batches, curves,
                      non_finite=curve_non_finite(curves["target"], curves["float64"]))
    if result.non_finite:
        result.non_finite_on_cpu = curve_non_finite_on_cpu(target, curves)
    if tol is not None and (target != "cpu" or result.non_finite) and not judge.judge_training(
            curves["target"], curves["float64"], judge.as_tolerance(tol), curves.get("cpu"))["ok"]:
        tol = judge.as_tolerance(tol)

        def rerun(trial: str):
            if trial == "nondeterministic":   # another curve that passes: the first order was unlucky
                again = runs_on(target, curve)["target"]
                return again != curves["target"] and judge.judge_training(again, curves["float64"], tol,
                                                                          curves["cpu"])["ok"]
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, curve)["target"]
                return judge.judge_training(again, curves["float64"], tol, curves["cpu"])["ok"]
            return None
        result.diagnosis = diagnose(target, rerun, non_finite=result.non_finite)
    return result


def _pad_id(config) -> int:
    """The pad id generate() needs for a batch; GPT-2 has none and pads with end-of-sequence."""
    return config.pad_token_id if config.pad_token_id is not None else config.eos_token_id


def greedy(model, batch: dict, side: Side, new_tokens: int, **options) -> dict:
    """Greedy generation by ``model`` (already placed on the side) from ``batch``, under the
    side's autocast: the new tokens and the scores greedy chose from. ``options`` go to
    ``generate`` (``use_cache=False``: every step recomputes the whole sequence).

    ``min_new_tokens`` keeps every row going for exactly ``new_tokens`` steps (the
    end-of-sequence candidate is masked until then), so the sides compare position by position.
    """
    import torch
    batch = on_device(batch, side.device)
    with torch.no_grad(), autocast_of(side):
        out = model.generate(**batch, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=_pad_id(model.config), output_scores=True,
                             return_dict_in_generate=True, **options)
    start = out.sequences.shape[1] - len(out.scores)
    scores = torch.stack([s.detach().cpu() for s in out.scores], dim=1)  # (rows, steps, vocab)
    return {"tokens": out.sequences[:, start:].cpu(), "scores": scores}


def compare_generations(name: str, target: str, greedy_of, out_tol, new_tokens: int, reference: str | None = None,
                        of: tuple[Side, ...] | None = None, dtype: str = "float32") -> GenerationRun:
    """``greedy_of(side)`` on every side of ``of`` (default ``sides(target)``), the target's
    tokens and scores judged against side ``reference`` (default ``reference_of(target)``;
    see ``judge.generation_record``). In half precision (``dtype``) scores compare
    normwise, and on an accelerator the CPU's own run, judged the same way against float64,
    is the yardstick (``GenerationRun.yardstick``)."""
    ref = reference or reference_of(target)
    half = dtype != "float32"
    first = (of or sides(target))[0]

    def run_of(side: dict) -> GenerationRun:
        record = judge.generation_record(side, runs[ref], out_tol, normwise=half)
        return GenerationRun(name, target, ref, new_tokens, **record, dtype=dtype,
                             non_finite=non_finite(side, runs["float64"], keys=("scores",)) if "float64" in runs
                             else 0)

    def passes(run: GenerationRun) -> bool:
        judged = judge.judge_generation(run, judge.as_tolerance(out_tol))
        return run.scores["ok"] and judged["verdict"] != "diverged"
    runs = runs_on(target, greedy_of, of)
    result = run_of(runs["target"])
    if result.non_finite and target != "cpu" and "float64" in runs:
        result.non_finite_on_cpu = non_finite_on_cpu(runs, keys=("scores",))
    if half and target != "cpu" and "cpu" in runs and ref != "cpu":
        result.yardstick = run_of(runs["cpu"])
    if not passes(result) or result.non_finite:
        def rerun(trial: str):
            import torch
            if trial == "nondeterministic":   # other scores that pass: the first order was unlucky
                again = runs_on(target, greedy_of, of)["target"]
                return not torch.equal(again["scores"], runs["target"]["scores"]) and passes(run_of(again))
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, greedy_of, of)["target"]
                return passes(run_of(again))
            if trial == "reduced-precision" and half:   # as compare_steps: float32 throughout, rounded alike
                full = runs_on(target, greedy_of, (in_float32(first),))["target"]
                if not passes(run_of(_in_dtypes_of(full, runs["target"]))):
                    return False
                if result.yardstick is None:   # no CPU run in this dtype to measure the miss by
                    return True
                # float32 is right: is the scores' miss one half precision reaches (causes.half_precision_explains)?
                from harness.parity.numerics import causes
                scale = float(runs["float64"]["scores"].abs().nan_to_num(posinf=0.0, neginf=0.0).max())
                return causes.half_precision_explains(dtype, [(result.scores["max_abs_err"],
                                                               result.yardstick.scores["max_abs_err"], scale)])
            return None
        result.diagnosis = diagnose(target, rerun, dtype, result.non_finite, in_half_weights(first))
    return result


def generate(name: str, target: str, out_tol, new_tokens: int = NEW_TOKENS) -> GenerationRun:
    """Greedy generation on the target and on its reference, from the same prompts
    (the dataset's first BATCH sentences); see ``judge.generation_record``."""
    base, rows = models.MODELS[name].make(), dataset()[:BATCH]

    def greedy_of(side):
        model = place(copy.deepcopy(base), side)
        return greedy(model, prompts(name, model, rows), side, new_tokens)
    return compare_generations(name, target, greedy_of, out_tol, new_tokens)
