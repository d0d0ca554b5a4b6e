"""References that cannot share the bug: the same model computed another way, on the target.

On the CPU target the reference of every other model check is float64: the same kernels in
another dtype. A bug that does not depend on the dtype (a kernel that maps grouped-query
heads wrongly, one that goes wrong past a number of keys) is in both, and cancels. So these
runs compare two computations that share the weights, the inputs and the device, and differ
only where such bugs live:

  sdpa_vs_eager         ``attn_implementation="sdpa"`` (``scaled_dot_product_attention``)
                        against ``"eager"`` (matmul, softmax, matmul, written out in
                        transformers): on the padded batch (output at the real positions,
                        loss, every gradient), and at the long length (greedy decoding
                        against a KV cache of ``inputs.long_tokens``: prefill and decode)
  cache_vs_recompute    greedy generation reading the KV cache (``use_cache=True``) against
                        recomputing the whole sequence at every step (``use_cache=False``):
                        on the left-padded prompts of different lengths, and at the long length

Both run the models with a head dim of 64 (harness.parity.models.inputs.kernel_model): the
registry's head dims (16, Llama's 8) reach none of MPS's own attention kernels, which take
64, 96, 128 and 256 for decoding and 32 to 256 for a prefill; at 64 the padded batch's
prefill, the decoding steps and, past 1,024 keys, the two-pass decoding kernel are MPS's own.

Both sides run in float32 on the target, so the tolerance is float32's (("model",
"float32") and ("model-grad", "float32")): two correct implementations differ by the order
of their sums. Greedy tokens may part only where the reference's top two were tied within
it (harness.parity.models.judge.judge_generation).

What each catches that float64 cannot: sdpa against eager, any wrong sdpa (its own grouped-
query mapping, which transformers uses where no mask is passed, and on MPS from torch 2.13
always; its masking; a long-key kernel); the cache against recomputation, any wrong
single-query decode path (the kernel a device picks for one query row and a long cache)
and a cache that is written or read wrongly. A failure on an accelerator is rerun for a
cause (nondeterminism, TF32); on the CPU, NaN or inf where the reference has a number is
"non-finite", anything else is judged by the tolerance alone.
"""
from __future__ import annotations

import copy
import functools

from harness.core import models
from harness.parity.models import inputs, judge, runs
from harness.parity.models.judge import GenerationRun, StepRun
from harness.parity.models.runs import Side

ATTENTION = ("sdpa", "eager")


def _on_target(target: str, run, attn: str):
    """``run(side)`` on the target for the side named ``attn`` (or "cache" / "no-cache"), in float32."""
    return runs.on_target(target, lambda device: run(Side(attn, device, "float32")))


def _pair_diagnosis(target: str, again, differs, passes, non_finite: int) -> dict:
    """The cause of a failing pair: "non-finite" where the first side gave NaN or inf where
    the second has numbers (any target); else, on an accelerator, ``again()`` reruns both
    sides, ``differs(rerun)`` says whether the first side gave other bits than the first time,
    and ``passes(rerun)`` judges a rerun: "nondeterministic" where a plain rerun differs and
    passes, "tf32" where one made with TF32 off passes."""
    def rerun(trial: str):
        if trial == "nondeterministic":
            repeat = again()
            return differs(repeat) and passes(repeat)
        if trial == "tf32":
            from harness.env import devices
            with devices.tf32(False):
                return passes(again())
        return None
    return runs.diagnose(target, rerun, non_finite=non_finite)


# --------------------------------------------------------------------------- sdpa against eager

def sdpa_vs_eager(name: str, target: str, out_tol, grad_tol) -> StepRun | str:
    """One forward and backward pass of ``name`` on the padded batch with sdpa and with
    eager attention, same weights and device, float32: sdpa's output at the real positions,
    loss and every gradient against eager's (``judge.measure``). Where the installed
    transformers has no sdpa for the model (``models.sdpa_missing``), why: a skip."""
    import torch
    missing = models.sdpa_missing(name)
    if missing:
        return missing   # a skip, with the reason (judge.run_in_child)
    out_tol, grad_tol = judge.as_tolerance(out_tol), judge.as_tolerance(grad_tol)
    bases = {attn: inputs.kernel_model(name, attn) for attn in ATTENTION}

    def step_of(attn: str, side: Side) -> dict:
        return inputs.padded_step(name, bases[attn], side)

    def both() -> dict:
        return {attn: _on_target(target, functools.partial(step_of, attn), attn) for attn in ATTENTION}
    got = both()
    result = StepRun(name, target, "eager", got["sdpa"]["output_name"],
                     **judge.measure(got["sdpa"], got["eager"], out_tol, grad_tol),
                     non_finite=runs.non_finite(got["sdpa"], got["eager"]),
                     setting={"compared": "sdpa against eager attention: same weights, inputs and device, float32",
                              "inputs": "padded batch"})
    if not runs.step_passed(result) or result.non_finite:
        def differs(rerun: dict) -> bool:
            return any(not torch.equal(rerun["sdpa"][k], got["sdpa"][k]) for k in ("output", "loss"))

        def passes(rerun: dict) -> bool:
            judged = judge.measure(rerun["sdpa"], rerun["eager"], out_tol, grad_tol)
            return judged["output"]["ok"] and judged["loss"]["ok"] and all(g["ok"] for g in judged["grads"])
        result.diagnosis = _pair_diagnosis(target, both, differs, passes, result.non_finite)
    return result


# --------------------------------------------------------------------------- pairs of greedy runs

def _compare_greedy(name: str, target: str, run_of, sides: tuple[str, str], out_tol, new_tokens: int,
                    setting: dict) -> GenerationRun:
    """Greedy runs ``run_of(side)`` for both ``sides`` on the target, the first judged
    against the second (``judge.generation_record``)."""
    import torch

    def both() -> dict:
        return {side: _on_target(target, run_of, side) for side in sides}
    got = both()
    first, second = sides

    def record_of(pair: dict) -> GenerationRun:
        return GenerationRun(name, target, second, new_tokens,
                             **judge.generation_record(pair[first], pair[second], out_tol),
                             non_finite=runs.non_finite(pair[first], pair[second], keys=("scores",)), setting=setting)

    def passes(pair: dict) -> bool:
        run = record_of(pair)
        return run.scores["ok"] and judge.judge_generation(run, judge.as_tolerance(out_tol))["verdict"] != "diverged"
    result = record_of(got)
    if not passes(got) or result.non_finite:
        def differs(pair: dict) -> bool:
            return not torch.equal(pair[first]["scores"], got[first]["scores"])
        result.diagnosis = _pair_diagnosis(target, both, differs, passes, result.non_finite)
    return result


def _long(name: str, target: str, new_tokens: int) -> tuple[int, dict]:
    length, why = inputs.long_tokens(target, host_side=False)
    return length, {"long_tokens": length, "long_tokens_reason": why, "kv_cache_tokens": length + new_tokens - 1}


def sdpa_vs_eager_long(name: str, target: str, out_tol,
                       new_tokens: int = inputs.LONG_NEW_TOKENS) -> GenerationRun | str:
    """Greedy decoding of ``new_tokens`` against a KV cache of ``inputs.long_tokens``
    prompt tokens, with sdpa and with eager attention (same weights, float32): the prefill's
    last scores and every decode step's, and the tokens."""
    missing = models.sdpa_missing(name)
    if missing:
        return missing
    length, setting = _long(name, target, new_tokens)
    bases = {attn: inputs.long_model(name, attn, length + new_tokens, kernel_heads=True) for attn in ATTENTION}

    def run_of(side: Side) -> dict:
        model = runs.place(copy.deepcopy(bases[side.name]), side)
        return runs.greedy(model, inputs.long_prompt(model, length), side, new_tokens)
    return _compare_greedy(name, target, run_of, ATTENTION, out_tol, new_tokens,
                           {**setting, "compared": "sdpa against eager attention: same weights, prompt and device, "
                                                   "float32"})


def cache_vs_recompute(name: str, target: str, out_tol, long: bool = False,
                       new_tokens: int | None = None) -> GenerationRun:
    """Greedy generation reading the KV cache against recomputing the whole sequence at
    every step (``use_cache=False``), float32, same model on the target: from the
    left-padded prompts of different lengths, or (``long``) from a prompt of
    ``inputs.long_tokens`` tokens."""
    if long:
        new_tokens = new_tokens or inputs.LONG_NEW_TOKENS
        length, setting = _long(name, target, new_tokens)
        base = inputs.long_model(name, "sdpa", length + new_tokens, kernel_heads=True)

        def prompt(model):
            return inputs.long_prompt(model, length)
    else:
        new_tokens = new_tokens or runs.NEW_TOKENS
        base = inputs.kernel_model(name)
        setting = {"inputs": "prompts of different lengths, padded (on the left for a decoder-only model)"}

        def prompt(model):
            return inputs.prompt_batch(name, model)

    def run_of(side: Side) -> dict:
        model = runs.place(copy.deepcopy(base), side)
        return runs.greedy(model, prompt(model), side, new_tokens, use_cache=side.name == "cache")
    return _compare_greedy(name, target, run_of, ("cache", "no-cache"), out_tol, new_tokens,
                           {**setting, "compared": "decoding with the KV cache against recomputing the whole "
                                                   "sequence each step, float32, same device"})
