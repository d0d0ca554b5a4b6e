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

Inputs are prepared as a user's training script prepares them: a ``datasets.Dataset`` of
short sentences, tokenised by ``map(..., batched=True)`` with the MiniLM tokenizer (BERT
WordPiece), padded to ``MAX_LENGTH``, ``set_format("torch")``.

Every model runs in ``eval()`` mode, also while it trains: train-mode dropout draws from
each device's own random stream, so two devices would drop different units and nothing
would be comparable. ``eval()`` changes nothing else in these models (no batch norm) and
gradients flow as in ``train()``.

The judging (tie or divergence, the loss-curve bound) is the pure functions at the end,
which the test calls in the pytest process with the tolerances of ``harness.parity.tolerances``.
"""
from __future__ import annotations

import copy
import dataclasses

from harness.core import models
from harness.parity.tolerances import Tolerance

MAX_LENGTH = models.SEQ   # tokens per sentence after padding / truncation
BATCH = 4                 # sentences per batch
STEPS = 10                # AdamW steps in the training check
# AdamW learning rates. The config-built models start from random weights: 1e-3 moves them.
# The pretrained MiniLM is fine-tuned at transformers' TrainingArguments default, 5e-5: at
# 1e-3 its loss jumped about (0.28 to 1.1 within 10 steps) and that chaos amplified float32's
# rounding (5e-4 from float64 by step 7, against about 1e-6 at 5e-5), which says nothing
# about a device.
LR = 1e-3
FINE_TUNE_LR = 5e-5
DATA_SEED = 0             # which rows make each training batch
NEW_TOKENS = 16           # greedy generation length
PROMPT_TOKENS = 6         # decoder-only prompts: the first tokens of each sentence, unpadded
DECODERS = ("gpt2", "t5", "llama")

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


def learning_rate(name: str) -> float:
    """The AdamW learning rate of the training check for model ``name`` (see LR)."""
    return FINE_TUNE_LR if models.MODELS[name].pretrained else LR


@dataclasses.dataclass(frozen=True)
class Side:
    """One run of the model: where, and in which precision."""
    name: str     # "target" | "cpu" | "float64"
    device: str
    dtype: str


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


def runs_on(target: str, compute) -> dict:
    """``compute(side)`` for every side of ``target`` (the CPU and float64 first). A stand-in
    target (harness.core.devices.StandIn) runs it on the CPU, given the CPU's float32 result and
    float64's, rounded to float32."""
    from harness.core import devices
    out = {side.name: compute(side) for side in sides(target) if side.name != "target"}
    side = sides(target)[0]
    stand_in = devices.stand_in(target)
    if stand_in is None:
        out["target"] = compute(side)
    else:
        out["target"] = stand_in.run(lambda: compute(dataclasses.replace(side, device="cpu")), out.get("cpu"),
                                     _rounded(out["float64"]))
    return out


def diagnose(target: str, rerun) -> dict:
    """The cause of a target's failure (harness.parity.causes): ``rerun(trial)`` reruns the target
    side for "nondeterministic" (True when its result differs) and "tf32" (True when it
    passes with TF32 off)."""
    from harness.core import devices
    from harness.parity import causes
    kind = devices.kind_of(target)
    return causes.describe(causes.diagnose(kind, "float32", rerun), kind, "float32")


# --------------------------------------------------------------------------- inputs

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


def training_rows(steps: int = STEPS, seed: int = DATA_SEED) -> list[list[int]]:
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
    return model.to(device=side.device, dtype=getattr(torch, side.dtype)).eval()


def _on(batch: dict, device: str) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _main_output(output):
    """The output a user reads: logits, or the last hidden state of a bare encoder."""
    logits = getattr(output, "logits", None)
    return ("logits", logits) if logits is not None else ("last_hidden_state", output.last_hidden_state)


def _step(name: str, base, rows: dict, side: Side) -> dict:
    """One forward and backward pass on one side; tensors brought back to the CPU."""
    from harness.ops.audit import loss_of
    model = place(copy.deepcopy(base), side)
    batch = _on(model_batch(name, model, rows), side.device)
    output = model(**batch)
    loss = loss_of(output, batch, models.MODELS[name].loss_fn, model)
    loss.backward()
    out_name, out = _main_output(output)
    grads = {n: (p.grad.detach().cpu() if p.grad is not None else None) for n, p in model.named_parameters()}
    return {"output_name": out_name, "output": out.detach().cpu(), "loss": loss.detach().cpu(), "grads": grads}


def _grad_entry(name: str, actual, expected, scale: float, tol: Tolerance) -> dict:
    """One parameter's gradient against the reference, normwise (see compare_gradients)."""
    from harness.parity import accuracy
    if actual is None or expected is None:
        return {"name": name, "ok": False, "margin": float("inf"), "max_abs_err": float("nan"),
                "rel_err": float("nan"), "scale": 0.0,
                "reason": f"no gradient on the {'target' if actual is None else 'reference'} side"}
    own = float(expected.abs().max()) if expected.numel() else 0.0
    got = accuracy.compare(actual, expected, Tolerance(tol.rtol, tol.atol * scale, tol.source), normwise=True)
    err = got["max_abs_err"]
    return {"name": name, "ok": got["ok"], "margin": got["margin"], "max_abs_err": err,
            "rel_err": err / own if own else (float("inf") if err else 0.0), "scale": own, "reason": got["reason"]}


def compare_gradients(actual: dict, expected: dict, tol: Tolerance) -> dict:
    """Every parameter's gradient against the reference's.

    Normwise per tensor: the allowed error of parameter p is
    ``tol.rtol * max|g_ref_p| + tol.atol * G``, G the largest gradient element of the whole
    model. Elementwise comparison fails on the small elements of a gradient, which are
    sums of large terms that cancel (float32 keeps the terms' absolute error, not a
    relative one); and a tensor whose exact gradient is zero (an attention key bias:
    softmax ignores a shift shared by all keys) holds rounding noise only. G gives the
    absolute floor a unit: gradients have none of their own, they scale with the loss.
    Measured, float32 against float64: every gradient that is not exactly zero met the
    rtol term alone; the floor is there for those that are.

    What it resolves: a relative error e in parameter p's gradient fails once
    e > rtol + atol * G / max|g_ref_p|, so 1e-4 on the largest gradients, about 1.3e-3 on
    the tiny BERT's encoder layers (1e-3 of its largest, the classifier's) and only about
    0.2 on its query and key weights (5e-6 of its largest).

    Returns ``grads`` (one entry per parameter with a gradient on either side, in the
    model's order: name, ok, margin, max_abs_err, rel_err = max_abs_err / max|g_ref_p|,
    scale = max|g_ref_p|, reason), ``without_grad`` (parameters no gradient reached on
    either side, e.g. a pooler the loss does not use) and ``scale`` (G).
    """
    present = [g for g in expected.values() if g is not None and g.numel()]
    scale = max((float(g.abs().max()) for g in present), default=0.0)
    grads, without = [], []
    for name, exp in expected.items():
        act = actual.get(name)
        if act is None and exp is None:
            without.append(name)
        else:
            grads.append(_grad_entry(name, act, exp, scale, tol))
    return {"grads": grads, "without_grad": without, "scale": scale}


def _summary(cmp: dict) -> dict:
    return {k: cmp[k] for k in ("ok", "max_abs_err", "max_rel_err", "margin", "reason")}


def _measure(actual: dict, expected: dict, out_tol: Tolerance, grad_tol: Tolerance) -> dict:
    from harness.parity import accuracy
    return {"output": _summary(accuracy.compare(actual["output"], expected["output"], out_tol)),
            "loss": {**_summary(accuracy.compare(actual["loss"], expected["loss"], out_tol)),
                     "value": float(actual["loss"]), "reference": float(expected["loss"])},
            **compare_gradients(actual["grads"], expected["grads"], grad_tol)}


def _worst_grad(measured: dict) -> dict:
    """The gradient with the largest normwise error, for the float64 side-by-side."""
    worst = max(measured["grads"], key=lambda g: g["margin"], default=None)
    return {"output_max_abs_err": measured["output"]["max_abs_err"], "loss_abs_err": measured["loss"]["max_abs_err"],
            "grad_worst": worst["name"] if worst else None, "grad_worst_rel_err": worst["rel_err"] if worst else None}


def _tol(pair) -> Tolerance:
    rtol, atol = pair
    return Tolerance(float(rtol), float(atol), "")


def forward_backward(name: str, target: str, out_tol, grad_tol) -> dict:
    """Output, loss and gradients of ``name`` on ``target`` against float64.

    ``out_tol`` and ``grad_tol`` are (rtol, atol) pairs from the test's tolerance table:
    outputs compare elementwise, gradients normwise (``compare_gradients``). The batch is
    the dataset's first BATCH rows. On an accelerator each item passes when it meets the
    tolerance against float64 or is no less accurate than the CPU in float32
    (``_accuracy``); ``vs_float64`` holds both float32 sides measured against float64,
    ``vs_cpu`` the target against the CPU (agreement, recorded, not judged), and a failure
    its cause (``diagnose``).
    """
    base, rows = models.MODELS[name].make(), dataset()[:BATCH]
    out_tol, grad_tol = _tol(out_tol), _tol(grad_tol)

    def step(side):
        return _step(name, base, rows, side)
    runs = runs_on(target, step)
    result = {"model": name, "target": target, "reference": "float64", "output_name": runs["target"]["output_name"]}
    if target == "cpu":
        return {**result, **_measure(runs["target"], runs["float64"], out_tol, grad_tol)}
    result.update(_accuracy(runs, out_tol, grad_tol))
    result["vs_cpu"] = _worst_grad(_measure(runs["target"], runs["cpu"], out_tol, grad_tol))
    result["vs_float64"] = {s: _worst_grad(_measure(runs[s], runs["float64"], out_tol, grad_tol))
                            for s in ("target", "cpu")}
    if not (result["output"]["ok"] and result["loss"]["ok"] and all(g["ok"] for g in result["grads"])):
        def rerun(trial: str):
            import torch

            from harness.core import devices
            if trial == "nondeterministic":
                again = runs_on(target, step)["target"]
                return any(not torch.equal(again[k], runs["target"][k]) for k in ("output", "loss"))
            if trial == "tf32":
                with devices.tf32(False):
                    again = {**runs, "target": runs_on(target, step)["target"]}
                judged = _accuracy(again, out_tol, grad_tol)
                return judged["output"]["ok"] and judged["loss"]["ok"] and all(g["ok"] for g in judged["grads"])
            return None
        result.update(diagnose(target, rerun))
    return result


def _accuracy(runs: dict, out_tol: Tolerance, grad_tol: Tolerance) -> dict:
    """The target's output, loss and gradients judged by their accuracy against float64,
    the CPU's float32 as the yardstick: output and loss elementwise by
    accuracy.compare_accuracy; a gradient passes normwise against float64 (compare_gradients)
    or when its error is within ACCURACY_FACTOR x the CPU's + ACCURACY_ULPS units in the last
    place of float32 at its largest element."""
    import torch

    from harness.parity import accuracy, tolerances
    t, c, r = runs["target"], runs["cpu"], runs["float64"]

    def accurate(key: str) -> dict:
        return accuracy.compare_accuracy(t[key], c[key], r[key], out_tol, torch.float32, tolerances.ACCURACY_FACTOR,
                                       tolerances.ACCURACY_ULPS, normwise=False)
    grads = compare_gradients(t["grads"], r["grads"], grad_tol)
    cpu_grads = {g["name"]: g for g in compare_gradients(c["grads"], r["grads"], grad_tol)["grads"]}
    for g in grads["grads"]:
        yard = cpu_grads.get(g["name"])
        if g["ok"] or yard is None or not (g["max_abs_err"] == g["max_abs_err"]):  # NaN: no gradient
            continue
        unit = float(accuracy.ulp(torch.tensor([g["scale"]], dtype=torch.float64), torch.float32)[0])
        allowed = tolerances.ACCURACY_FACTOR * yard["max_abs_err"] + tolerances.ACCURACY_ULPS * unit
        if g["max_abs_err"] <= allowed:
            g.update(ok=True, margin=g["max_abs_err"] / allowed if allowed else 0.0, rule="as-accurate-as-cpu",
                     reason="")
    return {"output": _summary(accurate("output")),
            "loss": {**_summary(accurate("loss")), "value": float(t["loss"]), "reference": float(r["loss"])},
            **grads}


def _losses(name: str, base, data, batches: list[list[int]], side: Side) -> list[float]:
    """Train a copy of ``base`` on one side: the loss before each AdamW step.

    A pretrained model is fine-tuned with its input embedding table frozen, a common
    fine-tuning choice and here a matter of time: MiniLM's table is 11.7M of its 22.7M
    parameters, and AdamW over it tripled the check's time on a 2-core CPU. Its gradient
    is still compared, in ``forward_backward``.
    """
    import torch
    from harness.ops.audit import loss_of
    model = place(copy.deepcopy(base), side)
    if models.MODELS[name].pretrained:
        model.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate(name))
    losses = []
    for rows in batches:
        batch = _on(model_batch(name, model, data[rows]), side.device)
        loss = loss_of(model(**batch), batch, models.MODELS[name].loss_fn, model)
        losses.append(loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return losses


def train(name: str, target: str, steps: int = STEPS, tol=None) -> dict:
    """The loss curves of ``steps`` AdamW steps on every side, from the same weights and
    batches. The target's curve is judged against float64's (``judge_training``, with the
    CPU's curve as the yardstick on an accelerator); with ``tol`` (rtol, atol), a target
    that fails has its cause diagnosed here, where it can be rerun."""
    base, data = models.MODELS[name].make(), dataset()
    batches = training_rows(steps)

    def curve(side):
        return _losses(name, base, data, batches, side)
    curves = runs_on(target, curve)
    result = {"model": name, "target": target, "reference": "float64", "lr": learning_rate(name),
              "batches": batches, "losses": curves}
    if tol is not None and target != "cpu" and not judge_training(
            curves["target"], curves["float64"], _tol(tol), curves["cpu"])["ok"]:
        def rerun(trial: str):
            from harness.core import devices
            if trial == "nondeterministic":
                return runs_on(target, curve)["target"] != curves["target"]
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, curve)["target"]
                return judge_training(again, curves["float64"], _tol(tol), curves["cpu"])["ok"]
            return None
        result.update(diagnose(target, rerun))
    return result


def _pad_id(config) -> int:
    """The pad id generate() needs for a batch; GPT-2 has none and pads with end-of-sequence."""
    return config.pad_token_id if config.pad_token_id is not None else config.eos_token_id


def _greedy(name: str, base, rows: dict, side: Side, new_tokens: int) -> dict:
    """Greedy generation on one side: the new tokens and the scores greedy chose from.

    ``min_new_tokens`` keeps every row going for exactly ``new_tokens`` steps (the
    end-of-sequence candidate is masked until then), so the sides compare position by position.
    """
    import torch
    model = place(copy.deepcopy(base), side)
    batch = _on(prompts(name, model, rows), side.device)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=_pad_id(model.config), output_scores=True,
                             return_dict_in_generate=True)
    start = out.sequences.shape[1] - len(out.scores)
    scores = torch.stack([s.detach().cpu() for s in out.scores], dim=1)  # (rows, steps, vocab)
    return {"tokens": out.sequences[:, start:].cpu(), "scores": scores}


def _comparable(tokens, reference):
    """(rows, steps) mask: True where every token before this step agreed on both sides."""
    import torch
    agreed = (tokens == reference).long().cumprod(dim=1)
    return torch.cat([torch.ones_like(agreed[:, :1]), agreed[:, :-1]], dim=1).bool()


def _top2(scores) -> tuple[list, list]:
    """Per row and step: the best score and its lead over the second best."""
    top = scores.double().topk(2, dim=-1).values
    return top[..., 0].tolist(), (top[..., 0] - top[..., 1]).tolist()


def generation_record(got: dict, exp: dict, out_tol) -> dict:
    """Plain data from two sides' greedy runs (``tokens``: rows x steps, ``scores``: rows x
    steps x vocab): both sides' tokens, the reference's top score and top-2 gap at every
    step, and the scores compared (``out_tol``, elementwise) over the steps both sides
    reached from the same prefix (a row's step t counts while the tokens before it agree)."""
    from harness.parity import accuracy
    comparable = _comparable(got["tokens"], exp["tokens"])
    top, gap = _top2(exp["scores"])
    scores = accuracy.compare(got["scores"][comparable], exp["scores"][comparable], _tol(out_tol))
    return {"tokens": got["tokens"].tolist(), "reference_tokens": exp["tokens"].tolist(), "reference_top": top,
            "reference_gap": gap, "comparable": comparable.tolist(), "scores": _summary(scores)}


def generate(name: str, target: str, out_tol, new_tokens: int = NEW_TOKENS) -> dict:
    """Greedy generation on the target and on its reference, from the same prompts
    (the dataset's first BATCH sentences); see ``generation_record``."""
    base, rows = models.MODELS[name].make(), dataset()[:BATCH]
    ref = reference_of(target)

    def greedy(side):
        return _greedy(name, base, rows, side, new_tokens)

    def passes(record: dict) -> bool:
        return record["scores"]["ok"] and judge_generation(record, _tol(out_tol))["verdict"] != "diverged"
    runs = runs_on(target, greedy)
    result = {"model": name, "target": target, "reference": ref, "new_tokens": new_tokens,
              **generation_record(runs["target"], runs[ref], out_tol)}
    if target != "cpu" and not passes(result):
        def rerun(trial: str):
            import torch

            from harness.core import devices
            if trial == "nondeterministic":
                return not torch.equal(runs_on(target, greedy)["target"]["scores"], runs["target"]["scores"])
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, greedy)["target"]
                return passes(generation_record(again, runs[ref], out_tol))
            return None
        result.update(diagnose(target, rerun))
    return result


# --------------------------------------------------------------------------- judging

def diverged_gradients(grads: list[dict]) -> list[dict]:
    """The gradient entries out of tolerance, worst (largest margin) first."""
    return sorted((g for g in grads if not g["ok"]), key=lambda g: -g["margin"])


def tie_allowance(top: float, tol: Tolerance) -> float:
    """How close two candidates may be and still swap under errors the tolerance accepts:
    each score may move by ``atol + rtol * |score|``, in opposite directions."""
    return 2 * (tol.atol + tol.rtol * abs(top))


def first_divergence(tokens: list[list[int]], reference: list[list[int]]) -> tuple[int, int] | None:
    """(row, step) of the earliest step at which any row's tokens differ, or None."""
    firsts = [(step, row) for row, (a, b) in enumerate(zip(tokens, reference))
              for step in range(min(len(a), len(b))) if a[step] != b[step]]
    if not firsts:
        return None
    step, row = min(firsts)
    return row, step


def judge_generation(run: dict, tol: Tolerance) -> dict:
    """Same tokens, a tie, or a divergence.

    At the first step where the tokens part, the reference's lead of its top candidate over
    the runner-up (``gap``) decides: within ``tie_allowance`` the two sides may legitimately
    pick different tokens (a tie: it passes, with a note); a clear lead that the target did
    not follow is a divergence. Later steps continue from different prefixes and say
    nothing more. ``closest``: the smallest lead over the steps both sides reached from the
    same prefix, and ``near_ties`` how many of those steps were within the allowance (a
    near-tie the sides happened to resolve alike).
    """
    steps = [(run["reference_gap"][r][t], tie_allowance(run["reference_top"][r][t], tol))
             for r, row in enumerate(run["comparable"]) for t, ok in enumerate(row) if ok]
    out = {"verdict": "same", "row": None, "step": None, "gap": None, "allowed_gap": None,
           "closest": min((gap for gap, _ in steps), default=None),
           "near_ties": sum(gap <= allowed for gap, allowed in steps), "comparable_steps": len(steps)}
    where = first_divergence(run["tokens"], run["reference_tokens"])
    if where is None:
        return out
    row, step = where
    gap, allowed = run["reference_gap"][row][step], tie_allowance(run["reference_top"][row][step], tol)
    return {**out, "verdict": "tie" if gap <= allowed else "diverged", "row": row, "step": step, "gap": gap,
            "allowed_gap": allowed}


def curve_divergence(losses: list[float], reference: list[float]) -> list[float]:
    """|loss - loss_ref| / |loss_ref| at each step."""
    return [abs(a - b) / abs(b) if b else abs(a - b) for a, b in zip(losses, reference)]


def curve_bound(steps: int, tol: Tolerance) -> list[float]:
    """The divergence allowed at each step: ``(k + 1) * tol.rtol`` at step k.

    Step 0 is a plain forward pass: its loss is held to the model tolerance's rtol. Each
    step may add as much again, so the allowance grows linearly. That is a chosen model,
    not a theorem: rounding differences that stay independent from step to step add up at
    most linearly, while a drift that compounds (each step's error feeding the next) grows
    geometrically and crosses the line, which is what the check is there to catch.
    Measured, float32 against float64 on the CPU over 10 steps: at most 1.6e-6 (MiniLM)
    and 1.1e-7 (the tiny models), under 0.3% of the allowance at the worst step.
    """
    return [(k + 1) * tol.rtol for k in range(steps)]


def judge_training(losses: list[float], reference: list[float], tol: Tolerance,
                   yardstick: list[float] | None = None) -> dict:
    """Per-step divergence against ``curve_bound``; ``ok`` when every step is within it.

    With a ``yardstick`` (the CPU's float32 curve, on an accelerator) a step may also
    diverge up to ACCURACY_FACTOR x the yardstick's divergence from the same reference +
    ACCURACY_ULPS units in the last place of float32: no less accurate than the CPU."""
    from harness.parity import tolerances
    div = curve_divergence(losses, reference)
    bound = curve_bound(len(div), tol)
    if yardstick is not None:
        unit = 2.0 ** -23
        bound = [max(b, tolerances.ACCURACY_FACTOR * y + tolerances.ACCURACY_ULPS * unit)
                 for b, y in zip(bound, curve_divergence(yardstick, reference))]
    over = [k for k, (d, b) in enumerate(zip(div, bound)) if not d <= b]
    worst = max(range(len(div)), key=lambda k: div[k] / bound[k], default=None)
    return {"ok": not over and len(losses) == len(reference), "divergence": div, "bound": bound,
            "max_divergence": max(div, default=0.0), "worst_step": worst, "over_steps": over,
            "margin": div[worst] / bound[worst] if worst is not None else 0.0}
