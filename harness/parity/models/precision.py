"""Whole-model parity in half precision: what ``torch.autocast`` gives a user in float16 and
bfloat16, on the padded inputs that make half precision go wrong.

Three runs per model and dtype, like the float32 ones (harness.parity.models.runs), on the
padded batch and prompts of harness.parity.models.inputs:

  forward_backward  output (real positions), loss and every gradient of one step under autocast
  train             the loss curve of ``STEPS`` AdamW steps under autocast, with
                    ``torch.amp.GradScaler`` in float16 (as the AMP recipe says: bfloat16 has
                    float32's range and needs none)
  generate          greedy generation under autocast from left-padded prompts of different lengths
  generate_long     the same from two prompts of 193 and 130 tokens, left-padded: a prefill past
                    MPS's 64-row query blocks in half precision, then decoding against it

The generation runs use the models with a head dim of 64 (harness.parity.models.inputs.
kernel_model), which MPS's own float16 / bfloat16 attention kernels take; the registry's
(16, Llama's 8) only ever reach MPSGraph's general path there.

Sides. The target computes under ``torch.autocast(device, dtype)``, its weights in float32
(mixed precision, what users run). The reference is the model in float64 on the CPU,
without autocast. On the CPU target the target is judged against it by the half-precision
tolerances (harness/parity/numerics/tolerances.py, ("model", dtype) and ("model-grad",
dtype), measured); on an accelerator by its accuracy, with the CPU's own autocast run in
the same dtype as the yardstick, where the CPU's autocast offers the dtype; a CPU that
misses float64 while the target does not is recorded as a finding about the CPU.

NaN or inf where float64 has a number fails with the cause "non-finite" on every target,
the CPU included, whatever float32 does: rounding loses digits, it does not make NaNs. The
classic case is a softmax over a row the mask hides entirely (a left-padded query row sees
only padding), or an overflow the float16 range cannot hold.

GradScaler. Its first steps may skip an update while it lowers the scale from 65536 (it
halves the scale on each step whose scaled gradients overflow float16; seen on the tiny
Llama's first step while its left-padded batch still labelled the first real token). That
is the recipe working, not a fault, so the float64 reference skips the same steps and the
curves stay comparable; the skipped steps are recorded. A scaler that skips every step has
gradients that never get finite: a failure, "non-finite".

Which targets offer which autocast dtype (``unsupported``): the CPU bfloat16 always (torch
>= 1.10) and float16 from torch 2.5 (PyTorch's CPU AMP documentation gained float16 in
2.5, pytorch#135299); MPS float16 from torch 2.5 and bfloat16 from 2.6 on macOS 14
(DESIGN facts; ``MPSBackend.dtypes`` says macOS 14); CUDA where ``Backend.dtypes`` lists
the dtype. Whatever the version says, a matmul under autocast must come out in the dtype
(``Backend.autocast_probe``), or the check is skipped with the reason.
"""
from __future__ import annotations

import contextlib
import copy

from harness.core import models
from harness.env import devices, fitness
from harness.parity.models import inputs, judge, runs
from harness.parity.models.judge import TrainRun
from harness.parity.models.runs import Side

HALF = ("float16", "bfloat16")
STEPS = 3                 # AdamW steps of the training check
NEW_TOKENS = 8            # greedy generation length
# (where, dtype) -> the torch version from which torch.autocast offers it there (see the module docstring)
AUTOCAST_SINCE = {("cpu", "bfloat16"): "1.10", ("cpu", "float16"): "2.5",
                  ("mps", "float16"): "2.5", ("mps", "bfloat16"): "2.6"}


# where -> the torch version from which torch.amp.GradScaler steps there: on MPS, 2.8. Before
# it the scaler is made, but its unscale_ takes the scale to float64 (MPS refuses: "Cannot
# convert a MPS Tensor to float64 dtype") and MPS has no _amp_foreach_non_finite_check_and_unscale_
# or _amp_update_scale_ kernel (torch/amp/grad_scaler.py and native_functions.yaml of torch 2.5
# to 2.8; accelerate's get_grad_scaler asks the same 2.8 of MPS)
SCALER_SINCE = {"mps": "2.8"}


def scaler_unsupported(rules: str, torch_version: str) -> str | None:
    """Why float16 training with loss scaling cannot run under ``rules``' GradScaler in this
    torch, in words a user can act on; None where it can."""
    since = SCALER_SINCE.get(rules)
    if since is None or fitness.has_feature(torch_version, since):
        return None
    return (f"torch.amp.GradScaler({rules!r}) steps from torch {since}: before it its unscale_ takes the scale to "
            f"float64, which {rules.upper()} refuses; this is torch {torch_version}: to train in float16 with loss "
            f"scaling upgrade torch, or train under bfloat16 autocast, which needs no scaler")


def _device_of(target: str) -> str:
    """Where a target computes: a stand-in on the CPU."""
    return devices.place(target)


def _rules_of(target: str) -> str:
    """The device whose autocast gates apply: an emulated device's (the emulated Mac: MPS's),
    the CPU's for a plain stand-in (it computes there), else the target's own."""
    rules = devices.rules_of(target)
    return _device_of(target) if rules == "stand-in" else rules


def _offered(target: str, dtype: str):
    """(why ``target``'s backend does not offer ``dtype`` at all, or None; where it computes;
    what a reason calls it; its backend): the first question of ``unsupported`` and of
    ``weights_unsupported``. An emulated device answers with its own backend (the emulated
    Mac: MPS's dtypes on the recorded macOS)."""
    import torch
    device, rules = _device_of(target), _rules_of(target)
    named = target if devices.is_emulated(target) else device
    backend = devices.backend(target if devices.is_emulated(target) else device)
    why = None
    if getattr(torch, dtype) not in backend.dtypes():
        extra = "; bfloat16 on MPS needs macOS 14 or newer and torch 2.3 or newer" if rules == "mps" and dtype == "bfloat16" else ""
        why = f"{named} does not offer {dtype} here{extra}"
    return why, device, named, backend


def unsupported(target: str, dtype: str) -> str | None:
    """Why autocast in ``dtype`` is not offered on ``target``, in words a user can act on;
    None when it is (the version, the backend's dtypes, then a matmul under autocast, in the
    target's context: an emulated device refuses there what the device would)."""
    import torch
    why, device, named, backend = _offered(target, dtype)
    if why:
        return why
    rules = _rules_of(target)
    since = AUTOCAST_SINCE.get((rules, dtype))
    if since and not fitness.has_feature(torch.__version__, since):   # a nightly of the release offers it
        return (f"torch.autocast on {rules} offers {dtype} from torch {since}; this is torch {torch.__version__}: "
                f"to run it, upgrade torch")
    with devices.on_device(target) if devices.is_emulated(target) else contextlib.nullcontext():
        ok, why = backend.autocast_probe(getattr(torch, dtype))
    if not ok:
        return f"torch.autocast({device!r}, dtype=torch.{dtype}) does not compute in {dtype} here: {why}"
    return None


def sides(target: str, dtype: str) -> tuple[Side, ...]:
    """The target under autocast in ``dtype``; on an accelerator the CPU under autocast in
    ``dtype`` too, where the CPU offers it (the yardstick); float64 on the CPU."""
    cpu = () if target == "cpu" or unsupported("cpu", dtype) else (Side("cpu", "cpu", "float32", dtype),)
    return (Side("target", target, "float32", dtype), *cpu, Side("float64", "cpu", "float64"))


# --------------------------------------------------------------------------- forward and backward

def forward_backward(name: str, target: str, dtype: str, out_tol, grad_tol):
    """Output, loss and every gradient of one step of ``name`` under autocast in ``dtype``
    on the padded batch, against float64 (``runs.compare_steps``); the reason as a string
    where the target does not offer autocast in ``dtype``."""
    why = unsupported(target, dtype)
    if why:
        return why
    base = models.MODELS[name].make()

    def step_of(side):
        return inputs.padded_step(name, base, side)
    return runs.compare_steps(name, target, step_of, out_tol, grad_tol, sides(target, dtype), dtype)


# --------------------------------------------------------------------------- training steps

def _scaler(side: Side):
    """``torch.amp.GradScaler`` on the side's device for float16, None otherwise; raises
    where this torch has none for the device."""
    import torch
    if side.autocast != "float16":
        return None
    return torch.amp.GradScaler(torch.device(side.device).type)


def losses(name: str, base, side: Side, steps: int = STEPS, skip: list[bool] | None = None) -> dict:
    """Train a copy of ``base`` on the padded batch on one side: the loss before each of
    ``steps`` AdamW steps and after the last, which steps were skipped, and the loss scale
    after each (GradScaler, float16). ``skip``: steps this side leaves out as well (the
    float64 reference follows the target's scaler). A pretrained model's input embedding
    table stays frozen (runs._losses says why)."""
    import torch
    model = runs.place(copy.deepcopy(base), side)
    if models.MODELS[name].pretrained:
        model.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=runs.learning_rate(name))
    scaler = _scaler(side)
    batch = runs.on_device(inputs.padded_batch(name, model), side.device)
    out = {"losses": [], "skipped": [], "scales": []}
    for k in range(steps + 1):
        with runs.autocast_of(side):
            loss = models.loss_of(model(**batch), batch, models.MODELS[name].loss_fn, model)
        out["losses"].append(float(loss.detach().float()))
        if k == steps:
            break
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            out["skipped"].append(scaler.get_scale() < before)  # the scale backs off exactly when a step is skipped
            out["scales"].append(scaler.get_scale())
        else:
            loss.backward()
            skipped = bool(skip and skip[k])
            if not skipped:
                opt.step()
            out["skipped"].append(skipped)
    return out


def train(name: str, target: str, dtype: str, tol, steps: int = STEPS):
    """The loss curves of ``steps`` AdamW steps under autocast in ``dtype`` (GradScaler in
    float16) on the padded batch, against float64 following the same skipped steps, judged
    by ``judge.judge_training`` with the half-precision tolerance (the CPU's autocast curve
    as the yardstick on an accelerator, where its scaler skipped the same steps); the reason
    as a string where the target does not offer it."""
    import torch
    why = unsupported(target, dtype)
    if why:
        return why
    if dtype == "float16" and (why := scaler_unsupported(_rules_of(target), torch.__version__)):
        return why
    base = models.MODELS[name].make()
    of = sides(target, dtype)
    try:
        _scaler(Side("target", _device_of(target), "float32", dtype))
    except Exception as exc:  # an older torch without GradScaler for this device
        return f"torch.amp.GradScaler({torch.device(_device_of(target)).type!r}) is not offered here: {exc}"
    runs_ = {s.name: None for s in of}
    runs_["target"] = runs.on_target(target, lambda device: losses(name, base, Side("target", device, "float32", dtype),
                                                                     steps))
    if "cpu" in runs_:
        runs_["cpu"] = losses(name, base, of[1], steps)
    skipped = runs_["target"]["skipped"]
    runs_["float64"] = runs.reference(lambda side: losses(name, base, side, steps, skip=skipped), of[-1])
    curves = {side: r["losses"] for side, r in runs_.items()}
    note = ""
    if "cpu" in runs_ and runs_["cpu"]["skipped"] != skipped:
        curves.pop("cpu")
        note = (f"no yardstick: the CPU's GradScaler skipped steps {_steps(runs_['cpu']['skipped'])}, the target's "
                f"{_steps(skipped)}")
    result = TrainRun(name, target, "float64", runs.learning_rate(name), steps, [], curves, dtype=dtype,
                      non_finite=runs.curve_non_finite(curves["target"], curves["float64"]),
                      skipped={side: r["skipped"] for side, r in runs_.items()}, scales=runs_["target"]["scales"],
                      note=note)
    every_step_skipped = bool(skipped) and all(skipped)
    if every_step_skipped:
        result.non_finite += len(skipped)
        result.note = "; ".join(filter(None, (
            f"GradScaler skipped every step (loss scale down to {runs_['target']['scales'][-1]:g}): the {dtype} "
            "gradients were never finite, where float64's are", note)))
    shared = runs.curve_non_finite_on_cpu(target, curves) if result.non_finite else None
    if shared is not None:   # a CPU curve is kept only where its GradScaler skipped alike: those steps are shared
        result.non_finite_on_cpu = shared + (len(skipped) if every_step_skipped else 0)
    tol = judge.as_tolerance(tol)
    if not judge.judge_training(curves["target"], curves["float64"], tol, curves.get("cpu"))["ok"] or result.non_finite:
        def rerun(trial: str):
            if trial == "nondeterministic":
                again = runs.on_target(target, lambda device: losses(
                    name, base, Side("target", device, "float32", dtype), steps))
                return again["losses"] != curves["target"] and judge.judge_training(
                    again["losses"], curves["float64"], tol, curves.get("cpu"))["ok"]
            if trial == "reduced-precision":   # the same steps without autocast (no scaler), the same ones skipped
                again = runs.on_target(target, lambda device: losses(
                    name, base, Side("target", device, "float32"), steps, skip=skipped))
                if not judge.judge_training(again["losses"], curves["float64"], tol, curves.get("cpu"))["ok"]:
                    return False
                if "cpu" not in curves:   # no CPU curve in this dtype to measure the miss by
                    return True
                # float32 is right: is the curve's miss one half precision reaches (causes.half_precision_explains)?
                from harness.parity.numerics import causes
                return causes.half_precision_explains(dtype, causes.tensor_misses([tuple(
                    torch.tensor(curves[side], dtype=torch.float64) for side in ("target", "cpu", "float64"))]))
            return None
        result.diagnosis = runs.diagnose(target, rerun, dtype, result.non_finite)
    return result


def _steps(skipped: list[bool]) -> list[int]:
    return [k for k, s in enumerate(skipped) if s]


# --------------------------------------------------------------------------- greedy generation

def generate(name: str, target: str, dtype: str, out_tol, new_tokens: int = NEW_TOKENS):
    """Greedy generation under autocast in ``dtype`` from the left-padded prompts of
    different lengths (T5: its padded encoder input), against float64's tokens and scores:
    where the tokens part, float64's top two must be tied within the half-precision
    tolerance (``judge.judge_generation``); the reason as a string where the target does not
    offer autocast in ``dtype``."""
    why = unsupported(target, dtype)
    if why:
        return why
    base = inputs.kernel_model(name)

    def greedy_of(side):
        model = runs.place(copy.deepcopy(base), side)
        return runs.greedy(model, inputs.prompt_batch(name, model), side, new_tokens)
    return runs.compare_generations(name, target, greedy_of, out_tol, new_tokens, reference="float64",
                                    of=sides(target, dtype), dtype=dtype)


LONG_NEW_TOKENS = 4       # greedy steps after the long padded prefill


def generate_long(name: str, target: str, dtype: str, out_tol, new_tokens: int = LONG_NEW_TOKENS):
    """Greedy generation under autocast in ``dtype`` from two prompts of
    inputs.LONG_PADDED_LENGTHS tokens, left-padded to the longer (inputs.long_padded_prompts):
    a prefill of more query rows than one of MPS's 64-row query blocks, whose padding rows are
    fully masked, then ``new_tokens`` decoding steps, by the model with a head dim of 64;
    judged as ``generate``. The reason as a string where the target does not offer autocast
    in ``dtype``."""
    why = unsupported(target, dtype)
    if why:
        return why
    base = inputs.kernel_model(name, positions=max(inputs.LONG_PADDED_LENGTHS) + new_tokens)

    def greedy_of(side):
        model = runs.place(copy.deepcopy(base), side)
        return runs.greedy(model, inputs.long_padded_prompts(model), side, new_tokens)
    result = runs.compare_generations(name, target, greedy_of, out_tol, new_tokens, reference="float64",
                                      of=sides(target, dtype), dtype=dtype)
    result.setting = {"inputs": f"prompts of {' and '.join(map(str, inputs.LONG_PADDED_LENGTHS))} tokens, "
                                "left-padded to the longer", "head_dim": inputs.KERNEL_HEAD_DIM}
    return result


# --------------------------------------------------------------------------- half-precision weights

# The other way users get half precision: the model itself in float16 or bfloat16
# (``model.half()``, ``from_pretrained(..., torch_dtype=torch.float16)``), the common way to
# run inference on a Mac in half the memory. Nothing stays in float32 then: the norms, the
# softmax and the residual sums compute in the half dtype, and transformers fills a float16
# model's attention mask with float16's lowest value (-65504, ``torch.finfo(dtype).min``),
# where under autocast the mask stays float32's. The checks run inference (no gradients):
# what a user does with half weights; training keeps float32 master weights (autocast,
# above).

def weights_unsupported(target: str, dtype: str) -> str | None:
    """Why a model with its weights in ``dtype`` cannot run on ``target``, in words a user
    can act on; None when it can (the backend's dtypes, then a linear layer, a layer norm
    and a softmax in ``dtype`` on the device, in the target's context: an emulated device
    refuses there what the device would)."""
    import torch
    why, device, named, _ = _offered(target, dtype)
    if why:
        return why
    dt = getattr(torch, dtype)
    try:
        with devices.on_device(target) if devices.is_emulated(target) else contextlib.nullcontext():
            x = torch.ones(2, 8, device=device, dtype=dt)
            layer = torch.nn.Linear(8, 8).to(device=device, dtype=dt)
            torch.nn.functional.layer_norm(layer(x), (8,)).softmax(-1).sum().item()
    except Exception as exc:   # a torch without the dtype's kernels on this device
        return (f"a model in {dtype} does not run on {named} here ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}): load it in float32")
    return None


def weights_sides(target: str, dtype: str) -> tuple[Side, ...]:
    """The target with its weights in ``dtype``; on an accelerator the CPU with its weights in
    ``dtype`` too, where the CPU runs them (the yardstick); float64 on the CPU."""
    cpu = () if target == "cpu" or weights_unsupported("cpu", dtype) else (Side("cpu", "cpu", dtype),)
    return (Side("target", target, dtype), *cpu, Side("float64", "cpu", "float64"))


def half_weights_forward(name: str, target: str, dtype: str, out_tol):
    """Inference by ``name`` with its weights in ``dtype`` (the head-dim-64 model,
    ``inputs.kernel_model``) on the padded batch: the output at
    the real positions and the loss against float64 (``runs.compare_steps``, no gradients);
    the reason as a string where the target does not run the dtype."""
    why = weights_unsupported(target, dtype)
    if why:
        return why
    base = inputs.kernel_model(name)

    def step_of(side):
        return runs.step(name, base, lambda model: inputs.padded_batch(name, model), side,
                         lambda model, batch: inputs.real_positions(name, model, batch), backward=False)
    result = runs.compare_steps(name, target, step_of, out_tol, out_tol, weights_sides(target, dtype), dtype)
    result.setting = {"weights": dtype}
    return result


def half_weights_generate(name: str, target: str, dtype: str, out_tol, new_tokens: int = NEW_TOKENS,
                          long: bool = False):
    """Greedy generation by ``name`` with its weights in ``dtype`` (the head-dim-64 model,
    ``inputs.kernel_model``) from the left-padded prompts of different lengths, or (``long``)
    from the two long left-padded prompts of ``generate_long``; judged as ``generate``. The
    reason as a string where the target does not run the dtype."""
    why = weights_unsupported(target, dtype)
    if why:
        return why
    base = inputs.kernel_model(name, positions=max(inputs.LONG_PADDED_LENGTHS) + new_tokens if long else 0)

    def greedy_of(side):
        model = runs.place(copy.deepcopy(base), side)
        batch = inputs.long_padded_prompts(model) if long else inputs.prompt_batch(name, model)
        return runs.greedy(model, batch, side, new_tokens)
    result = runs.compare_generations(name, target, greedy_of, out_tol, new_tokens, reference="float64",
                                      of=weights_sides(target, dtype), dtype=dtype)
    result.setting = {"weights": dtype, "head_dim": inputs.KERNEL_HEAD_DIM}
    if long:
        result.setting["inputs"] = (f"prompts of {' and '.join(map(str, inputs.LONG_PADDED_LENGTHS))} tokens, "
                                    "left-padded to the longer")
    return result
