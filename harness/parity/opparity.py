"""Op parity: every OpInfo op x dtype x pass, its numbers on a target against the CPU.

For each sample input of an op (OpInfo's own samples, made on the CPU from a fixed seed):

  cpu        the op on the CPU in the case's dtype
  reference  the op on the CPU in float64 (complex128) on the same values: the sample
             upcast exactly, with its strides and storage offset kept, so views such as
             ``as_strided`` and non-contiguous inputs mean the same thing
  target     the op on the target device in the case's dtype (same layout), when the
             target is not the CPU

Backward cases compare the gradients of the inputs, with the same fixed grad_outputs.
The verdict:

  target == cpu   cpu against the float64 reference: elementwise, normwise, or with the
                  reference's own sensitivity (``against_reference``): a low-precision
                  kernel's error on a small element that cancelled is not a bug, a kernel
                  that is off by 1e-3 is.
  target != cpu   the target by its accuracy against the same reference, the CPU's own
                  error in the same dtype as the yardstick (accuracy.compare_accuracy;
                  ``_on_target``): it passes when it meets the cpu target's rules or is no
                  less accurate than the CPU. Outputs by their kind (harness.parity.outputs):
                  integer and bool outputs exactly, index outputs among ties by the values
                  they select, an LU as P @ L @ U. Agreement with the CPU is recorded, not
                  judged. A failure is rerun to name its cause (harness.parity.causes). With no
                  float64 reference (integer inputs, no float64 kernel), against the CPU at
                  each output dtype's tolerance.

Samples that cannot be compared are set aside, not judged: a sample whose output changes
with the RNG seed (random ops), and ops that PyTorch itself declares not comparable with
the CPU (``DecorateInfo(unittest.skip(...), "TestCommon", "test_compare_cpu")`` on the
OpInfo: uninitialised ``empty*``, random ops, and others), with PyTorch's reason.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import time

from harness.core import outcomes
from harness.ops import opsweep
from harness.parity import tolerances
from harness.core.verdict import Verdict

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "complex64")
EXACT_DTYPES = ("int64", "int32", "uint8", "bool")
WIDE = {"float32": "float64", "float16": "float64", "bfloat16": "float64", "complex64": "complex128"}
GRAD_SEED = opsweep.GRAD_SEED
# The (rtol, atol) of a verdict are scaled by nothing: the tolerance table is the rule.


@dataclasses.dataclass(frozen=True)
class ParityCase:
    """An op x dtype x pass, with the targets whose parity it checks."""
    name: str
    variant_name: str
    dtype: str
    pass_: str
    targets: tuple[str, ...]

    op_key = opsweep.OpCase.op_key
    subject = opsweep.OpCase.subject
    variant = opsweep.OpCase.variant
    id = opsweep.OpCase.id


def cases(targets=("cpu", "cuda", "mps")) -> list[ParityCase]:
    """The ops suite's cases that have something to compare on each target.

    Floating and complex dtypes everywhere (on the CPU against float64); integer and bool
    dtypes on accelerators only, where the CPU's result is the exact reference. A
    registered stand-in (harness.core.devices.StandIn) is an accelerator with the CPU's dtypes.
    """
    from harness.core import devices
    out = []
    for c in opsweep.cases(targets):
        stand_ins = tuple(devices.STAND_INS) if "cpu" in c.targets else ()
        if c.dtype in FLOAT_DTYPES:
            ts = c.targets + stand_ins
        elif c.dtype in EXACT_DTYPES and c.pass_ == "forward":
            ts = tuple(t for t in c.targets if t != "cpu") + stand_ins
        else:
            ts = ()
        if ts:
            out.append(ParityCase(c.name, c.variant_name, c.dtype, c.pass_, ts))
    return out


# --------------------------------------------------------------------------- PyTorch's declarations

def _skip_reason(decorator) -> str | None:
    """The reason of a ``unittest.skip(reason)`` decorator, by applying it to a stub."""
    import unittest

    def stub():
        return None
    try:
        decorated = decorator(stub)
    except Exception:
        return None
    if decorated is stub:
        return None
    try:
        decorated()
    except unittest.SkipTest as exc:
        return str(exc) or "skipped"
    except Exception:
        return None
    return None


def pytorch_compare_cpu(op, device_type: str, dtype) -> tuple[str, str] | None:
    """What PyTorch's ``TestCommon.test_compare_cpu`` declares for this op on ``device_type``.

    ("skip", reason) for outputs PyTorch does not compare with the CPU, ("xfail", "") for
    a known mismatch, None for no declaration.
    """
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        try:
            active = info.is_active("TestCommon", "test_compare_cpu", device_type, dtype, {})
        except TypeError:  # older signature without param_kwargs
            active = info.is_active("TestCommon", "test_compare_cpu", device_type, dtype)
        if not active:
            continue
        for dec in info.decorators:
            if getattr(dec, "__name__", "") == "expectedFailure" or dec is __import__("unittest").expectedFailure:
                return ("xfail", "")
            reason = _skip_reason(dec)
            if reason is not None:
                return ("skip", reason)
    return None


def pytorch_tolerance(op, device_type: str, dtype, pass_: str) -> tolerances.Tolerance | None:
    """PyTorch's own per-op tolerance for comparing this device with the CPU, if it has one.

    The ``toleranceOverride`` decorators of the OpInfo for the device-vs-CPU tests:
    ``TestConsistency.test_output_match`` / ``test_output_grad_match`` (test_mps.py) on
    MPS, ``TestCommon.test_compare_cpu`` elsewhere.
    """
    if device_type == "mps":
        where = ("TestConsistency", "test_output_grad_match" if pass_ == "backward" else "test_output_match")
    else:
        where = ("TestCommon", "test_compare_cpu")
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != where[1] or getattr(info, "cls_name", None) != where[0]:
            continue
        try:
            active = info.is_active(where[0], where[1], device_type, dtype, {})
        except TypeError:
            active = info.is_active(where[0], where[1], device_type, dtype)
        for dec in info.decorators if active else ():
            tol = getattr(dec, "d", {}).get(dtype)
            if tol is not None:
                return tolerances.Tolerance(tol.rtol, tol.atol, f"PyTorch's toleranceOverride for {op.name} "
                                                                f"in {where[0]}.{where[1]} ({device_type})")
    return None


# Checks whose float32 gradient misses the float64 reference on a correct CPU (measured on
# torch 2.15) or on a real accelerator where the CPU is near its own limit (linalg.eig: an
# H100 with torch 2.11, 3x the CPU's 6.4e-6 on 2 of 50 elements): long computations whose rounding adds up beyond the elementwise float32
# tolerance and beyond the reference's sensitivity to the inputs. On the cpu target a miss
# here is recorded as a known limit (xfail, margin kept); a pass stays a pass.
KNOWN_LIMITS = {
    ("grid_sampler_3d", "float32", "backward"): "3-D interpolation weights summed over many voxels",
    ("linalg.eig", "float32", "backward"): "the eigendecomposition's gradient divides by differences of eigenvalues",
    ("linalg.householder_product", "float32", "backward"): "a product of Householder reflections",
    ("linalg.svd", "float32", "backward"): "the SVD's gradient divides by differences of singular values",
    ("svd", "float32", "backward"): "the SVD's gradient divides by differences of singular values",
    ("logcumsumexp", "float32", "backward"): "exp of differences of running log-sum-exps",
    ("nn.functional.ctc_loss", "float32", "backward"): "CTC's dynamic programme over every alignment",
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "float32", "backward"):
        "blockwise online-softmax attention recomputed in the backward",
}


# --------------------------------------------------------------------------- moving samples

def _relayout(t, dtype=None, device=None, fn=None):
    """``t`` in another dtype / on another device with the same sizes, strides and offset.

    ``fn``, if given, maps the underlying storage's values (as a flat tensor) first.
    """
    import torch
    if t.layout != torch.strided:
        out = t.detach().to(device=device or t.device, dtype=dtype or t.dtype)
        out = fn(out) if fn else out
    elif t.numel() == 0 or t.is_contiguous() and t.storage_offset() == 0:
        out = t.detach().to(device=device or t.device, dtype=dtype or t.dtype, copy=True).contiguous()
        out = fn(out) if fn else out
    else:
        extent = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
        flat = t.detach().as_strided((extent,), (1,), 0).to(device=device or t.device, dtype=dtype or t.dtype)
        out = (fn(flat) if fn else flat).as_strided(t.size(), t.stride(), t.storage_offset())
    return out.requires_grad_(t.requires_grad)


def convert(sample, from_dtype, to_dtype, device):
    """The sample with every ``from_dtype`` tensor (and dtype argument) in ``to_dtype``."""
    import torch

    def f(x):
        if isinstance(x, torch.dtype):
            return to_dtype if x == from_dtype else x
        return _relayout(x, to_dtype if x.dtype == from_dtype else None, device)
    return sample.transform(f)


# --------------------------------------------------------------------------- running

def _tensors(tree):
    import torch
    from torch.utils import _pytree
    return [t for t in _pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _evaluate(op, sample, pass_: str, seed: int, grad_dtype):
    """The processed output (forward) or the inputs' gradients (backward), on the CPU.

    A forward output defined only up to a choice (harness.parity.outputs.DEFINED: an LU's pivots)
    is reduced to what is defined instead of OpInfo's processing."""
    import torch
    from harness.parity import outputs
    torch.manual_seed(seed)
    raw = op(sample.input, *sample.args, **sample.kwargs)
    reduce = outputs.defined(op.name) if pass_ == "forward" else None
    out = reduce(raw) if reduce else sample.output_process_fn_grad(raw)
    if pass_ == "forward":
        return _to_cpu(out)
    outs = [t for t in _tensors(out) if t.requires_grad]
    ins = [t for t in _tensors((sample.input, sample.args, sample.kwargs)) if t.requires_grad]
    if not outs or not ins:
        return None
    gen = torch.Generator().manual_seed(GRAD_SEED)
    grads = [torch.randn(o.shape, generator=gen).to(grad_dtype or o.dtype).to(o.dtype).to(o.device) for o in outs]
    got = torch.autograd.grad(outs, ins, grads, allow_unused=True)
    return [None if g is None else g.detach().cpu() for g in got]


def _to_cpu(tree):
    import torch
    from torch.utils import _pytree

    def leaf(x):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            if x.layout != torch.strided:
                x = x.to_dense()
            return x.cpu()
        return x
    return _pytree.tree_map(leaf, tree)


def _worse(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    if a["ok"] != b["ok"]:
        return a if not a["ok"] else b
    return a if a["margin"] >= b["margin"] else b


def run_case(op_key: str, device: str, dtype: str, pass_: str) -> dict:
    """Compare one op x dtype x pass on ``device`` (a target name: cpu, cuda, mps, or a
    registered stand-in): the worst sample, or the first sample that misses (the samples
    after it are not run).
    """
    import torch
    from harness.core import devices
    from harness.parity import accuracy
    op = opsweep.op_table()[op_key]
    dt = getattr(torch, dtype)
    wide = getattr(torch, WIDE[dtype]) if dtype in WIDE else None
    kind = devices.kind_of(device.split(":")[0])
    tol = (pytorch_tolerance(op, kind, dt, pass_) if kind != "cpu" else None) or tolerances.tolerance(op_key, dtype)
    declared = pytorch_compare_cpu(op, kind, dt)
    if kind == "cpu" and declared and declared[0] == "xfail":  # a device-vs-CPU expectation
        declared = None
    started = time.perf_counter()
    res = {"samples": 0, "compared": 0, "random": 0, "no_grad": 0, "no_reference": 0, "inputs": [],
           "verdict": None, "target_ref": None, "cpu_ref": None, "error": None, "declared": declared,
           "tolerance": dataclasses.asdict(tol), "reference": WIDE.get(dtype, "cpu") if kind != "cpu" else WIDE.get(dtype),
           "kind": kind, "ties": 0, "cpu_off": None, "vs_cpu": None,
           "known_limit": KNOWN_LIMITS.get((op_key, dtype, pass_))}
    if declared and declared[0] == "skip":
        return {**res, "seconds": 0.0}
    torch.manual_seed(0)
    try:
        for i, sample in enumerate(op.sample_inputs("cpu", dt, requires_grad=pass_ == "backward")):
            res["samples"] += 1
            res["inputs"].append(fingerprint(sample))
            _compare_sample(op, sample, i, device, dt, wide, pass_, tol, res, accuracy, kind != "cpu")
            if res["verdict"] is not None and not res["verdict"]["ok"]:
                break  # the first miss decides; the rest would only cost time (sensitivity reruns)
    except Exception as exc:  # the op itself failed on the CPU or the target: no numbers
        res["error"] = outcomes.error_line(exc)
    res["seconds"] = round(time.perf_counter() - started, 4)
    return res


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def fingerprint(sample) -> str:
    """A short digest of one sample's inputs (values, dtypes, shapes, strides, other
    arguments). OpInfo generates the samples anew in each torch release; comparing digests
    tells a result that changed on the same inputs (the kernel) from one that changed
    because the inputs did."""
    h = hashlib.blake2b(digest_size=4)

    def feed(x) -> None:
        import torch
        if isinstance(x, torch.Tensor):
            t = x.detach()
            h.update(f"T{t.dtype}{tuple(t.shape)}{t.stride() if t.layout == torch.strided else t.layout}".encode())
            try:
                flat = t.resolve_conj().resolve_neg().contiguous().reshape(-1)
                h.update(flat.view(torch.uint8).numpy().tobytes())
            except (RuntimeError, TypeError):  # sparse, quantized ...: described, not read
                h.update(repr(t.layout).encode())
        elif isinstance(x, (list, tuple)):
            h.update(f"{type(x).__name__}{len(x)}".encode())
            for v in x:
                feed(v)
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                feed(x[k])
        elif callable(x):
            h.update(getattr(x, "__qualname__", type(x).__name__).encode())
        else:
            h.update(_ADDRESS.sub("", repr(x)).encode())

    feed(sample.input)
    feed(tuple(sample.args))
    feed(dict(sample.kwargs))
    return h.hexdigest()


def _compare_sample(op, sample, index, device, dt, wide, pass_, tol, res, accuracy, on_target: bool) -> None:
    cpu = _evaluate(op, sample, pass_, 0, None)
    if cpu is None:
        res["no_grad"] += 1
        return
    ref = None
    if wide is not None:
        try:
            ref = _reference(op, sample, dt, wide, pass_, like=cpu)
        except Exception:  # the op has no float64 kernel: no reference for this sample
            res["no_reference"] += 1
    if on_target:
        verdict = _on_target(op, sample, device, dt, wide, pass_, tol, cpu, ref, res)
        if verdict is None:
            return
    elif ref is not None:
        verdict = against_reference(op, sample, cpu, ref, dt, wide, pass_, tol)
        if not verdict["ok"] and _random(op, sample, pass_, cpu):
            res["random"] += 1
            return
    else:
        return
    verdict["sample"] = index
    res["compared"] += 1
    res["verdict"] = _worse(res["verdict"], verdict)


# --------------------------------------------------------------------------- on an accelerator

def _target_run(op, sample, device: str, dt, pass_: str, cpu, ref) -> tuple[object, list[str]]:
    """The sample on the target, and the ops the MPS fallback named during it. A stand-in
    computes on the CPU inside its context and may replace the result (devices.StandIn)."""
    import torch
    from harness.core import devices
    from harness.ops import audit, fallback
    stand_in = devices.stand_in(device)
    where = "cpu" if stand_in else device

    def compute():
        out = _evaluate(op, convert(sample, dt, dt, where), pass_, 0, None)
        # An output copied to the CPU with non_blocking=True (OpInfo's ``to`` samples) is
        # not there until the device has finished: read after, as a correct program does.
        audit.synchronize(torch.device(where))
        return out
    with fallback.capture() as cap:
        out = stand_in.run(compute, cpu, ref) if stand_in else compute()
    return out, list(getattr(cap, "ops", []) or [])


def _settled(op, sample, pass_: str, result):
    """A gradient among ties in its canonical order (harness.parity.outputs)."""
    from harness.parity import outputs
    return outputs.canonical_grad(op.name, sample, result) if pass_ == "backward" else result


def _prepared(op, sample, pass_: str, result, cpu) -> tuple[object, int]:
    """One side's result ready to judge: index outputs that only break ties another way
    than the CPU's settled to the CPU's, gradients among ties in canonical order; and how
    many elements were ties."""
    from harness.parity import outputs
    if pass_ == "forward":
        return outputs.settle_ties(op.name, sample, result, cpu)
    return _settled(op, sample, pass_, result), 0


def _on_target(op, sample, device: str, dt, wide, pass_: str, tol, cpu, ref, res: dict) -> dict | None:
    """The target's verdict on one sample: by its accuracy against float64, with the CPU as
    the yardstick (accuracy.compare_accuracy), or, with no float64 reference (integer
    inputs, no float64 kernel), against the CPU at each output dtype's tolerance. None when
    the sample is set aside (its output is drawn from the RNG)."""
    import torch
    from harness.core import devices
    from harness.parity import accuracy
    kind = devices.kind_of(device.split(":")[0])
    tgt, fell_back = _target_run(op, sample, device, dt, pass_, cpu, ref)
    tgt_s, ties = _prepared(op, sample, pass_, tgt, cpu)
    res["ties"] += ties
    cpu_s = _settled(op, sample, pass_, cpu)
    ref_s = _prepared(op, sample, pass_, ref, cpu)[0] if ref is not None else None  # float64 breaks ties too

    def judge(target, slack=None) -> dict:
        if ref_s is None:
            return accuracy.compare(target, cpu_s, _by_output_dtype(op, tol))
        return accuracy.compare_accuracy(target, cpu_s, ref_s, tol, dt, tolerances.ACCURACY_FACTOR,
                                       tolerances.ACCURACY_ULPS, slack=slack)

    verdict = judge(tgt_s)
    if not verdict["ok"] and ref_s is not None:  # a rounding-sized move of the inputs may explain it
        slack = _settled(op, sample, pass_, accuracy.slack_of(
            ref, [_reference(op, sample, dt, wide, pass_, trial, like=cpu) for trial in range(len(TRIALS))]))
        verdict = judge(tgt_s, slack)
    if not verdict["ok"] and _random(op, sample, pass_, cpu):
        res["random"] += 1
        return None
    res["vs_cpu"] = _worse(res["vs_cpu"], accuracy.compare(tgt_s, cpu_s, _by_output_dtype(op, tol)))
    if ref_s is not None:
        res["target_ref"] = _worse(res["target_ref"], accuracy.compare(tgt_s, ref_s, tol))
        cpu_vs_ref = accuracy.compare(cpu_s, ref_s, tol)
        res["cpu_ref"] = _worse(res["cpu_ref"], cpu_vs_ref)
        if verdict["ok"] and not cpu_vs_ref["ok"] and not accuracy.compare(cpu_s, ref_s, tol, normwise=True)["ok"]:
            target_vs_ref = accuracy.compare(tgt_s, ref_s, tol, normwise=True)
            if target_vs_ref["ok"] and (res["cpu_off"] is None or cpu_vs_ref["margin"] > res["cpu_off"]["cpu_margin"]):
                res["cpu_off"] = {"cpu_margin": cpu_vs_ref["margin"], "cpu_err": cpu_vs_ref["max_abs_err"],
                                  "target_err": target_vs_ref["max_abs_err"], "sample": res["samples"] - 1}
    if not verdict["ok"]:
        from harness.parity import causes
        dtype = str(dt).removeprefix("torch.")

        def rerun(trial: str) -> bool:
            if trial == "cpu-fallback":
                return bool(fell_back)
            if trial == "nondeterministic":
                again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
                return not accuracy.compare(_prepared(op, sample, pass_, again, cpu)[0], tgt_s, tolerances.EXACT)["ok"]
            if trial == "tf32":
                with devices.tf32(False):
                    again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
            else:  # reduced-precision: the target on float32 inputs, rounded back
                wider = torch.complex64 if dt.is_complex else torch.float32
                stand_in = devices.stand_in(device)

                def widened():
                    return _round(_evaluate(op, convert(sample, dt, wider, "cpu" if stand_in else device), pass_,
                                            0, dt), wider, dt)
                again = stand_in.run(widened, cpu, ref) if stand_in else widened()
            return judge(_prepared(op, sample, pass_, again, cpu)[0])["ok"]
        verdict.update(causes.describe(causes.diagnose(kind, dtype, rerun), kind, dtype), fallback_ops=fell_back)
    return verdict


def _by_output_dtype(op, tol):
    """``tol`` for floating outputs of floating inputs; for an integer case, each floating
    output is judged at its own dtype's tolerance (atan2 of int32 is a float32), integer
    and bool outputs exactly."""
    if tol.rtol or tol.atol:
        return tol
    return lambda dtype: tolerances.tolerance(op.name, dtype)


def _random(op, sample, pass_: str, first) -> bool:
    """Is the output drawn from an RNG? Asked only of a mismatch (a random op whose values
    agree anyway, such as dropout with p=0, is compared as it is).

    Yes if the run dispatches an aten op tagged ``nondeterministic_seeded`` (OpInfo wraps
    some factories, randn among them, in a fixed seed, so the output does not change with
    the caller's seed, yet float32 and float64 draw different streams), or if the output
    changes with the seed.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from harness.parity import accuracy
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None)

    class Seeded(TorchDispatchMode):
        drew = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # a private generator passed explicitly (our fixed grad_outputs) is not the op's randomness
            if seeded is not None and seeded in getattr(func, "tags", ()) and (kwargs or {}).get("generator") is None:
                Seeded.drew = True
            return func(*args, **(kwargs or {}))
    with Seeded():
        _evaluate(op, sample, pass_, 1, None)
    if Seeded.drew:
        return True
    # Run again outside any dispatch mode: a mode alone can change a kernel's result (torch
    # 2.15's linalg.polar complex64), which would pass a wrong result off as a random one.
    again = _evaluate(op, sample, pass_, 1, None)
    return not accuracy.compare(again, first, tolerances.EXACT)["ok"]


def against_reference(op, sample, result, ref, dt, wide, pass_, tol) -> dict:
    """``result`` (in ``dt``) against the float64 reference: the first rule that passes.

    elementwise, then normwise (cancellation), then elementwise with the reference's own
    sensitivity to rounding-sized input changes as slack (ill-conditioned inputs, values
    at a bin edge or a rounding boundary). A float16 / bfloat16 result that fails all
    three is a precision limit, told apart by the same computation in float32 (rounded to
    ``dt``): if that meets the reference, ``dt`` is too narrow for this input
    ("narrow-dtype"); if it misses too, the op is ill-conditioned or discontinuous here
    ("ill-conditioned"). A float32 or complex64 result has no such excuse.
    """
    import torch
    from harness.parity import accuracy
    verdict = accuracy.compare(result, ref, tol)
    if verdict["ok"]:
        return verdict
    normwise = accuracy.compare(result, ref, tol, normwise=True)
    if normwise["ok"]:
        return normwise
    slack = accuracy.slack_of(ref, [_reference(op, sample, dt, wide, pass_, trial, like=result)
                                  for trial in range(len(TRIALS))])
    sensitive = accuracy.compare(result, ref, tol, slack=slack)
    if sensitive["ok"] or dt not in (torch.float16, torch.bfloat16):
        return sensitive
    try:
        f32 = _round(_evaluate(op, convert(sample, dt, torch.float32, "cpu"), pass_, 0, dt), torch.float32, dt)
        via32 = accuracy.compare(f32, ref, tol, slack=slack)
    except Exception as exc:  # no float32 kernel to tell the two apart
        via32 = {"ok": False, "margin": None, "reason": outcomes.error_line(exc)}
    sensitive["precision_limit"] = "narrow-dtype" if via32["ok"] else "ill-conditioned"
    sensitive["float32_margin"] = via32["margin"]
    return sensitive


def _round(tree, wide, dt):
    import torch
    from torch.utils import _pytree
    return _pytree.tree_map(lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.dtype == wide else x, tree)


# How far the float64 inputs move in a sensitivity trial: K units of the low-precision
# dtype's epsilon, relatively (a kernel rounds several times per output element: a few
# units of error each) (zeros and signs stay), with these sign patterns: all up,
# all down, alternating between input tensors (a / b moves when a and b move apart),
# and random per element (a sum or a difference within one tensor moves).
K_EPS = 8
TRIALS = ("up", "down", "alternate", "random")


def _perturb(sample, wide, eps: float, trial: int):
    import torch
    gen = torch.Generator().manual_seed(trial)
    counter = iter(range(10**9))

    def f(x):
        if not isinstance(x, torch.Tensor) or x.dtype != wide or x.numel() == 0:
            return x
        j = next(counter)

        def move(values):  # values: the tensor's storage, so a shared (expanded) value moves once
            if TRIALS[trial] == "random":
                sign = torch.randint(0, 2, values.shape, generator=gen).to(values.dtype) * 2 - 1
            else:
                sign = {"up": 1.0, "down": -1.0, "alternate": (-1.0) ** j}[TRIALS[trial]]
            return values * (1 + sign * K_EPS * eps)
        return _relayout(x, fn=move)
    return sample.transform(f)


def _reference(op, sample, dt, wide, pass_: str, trial: int | None = None, like=None):
    """The op in float64 on the sample's values, rounded to ``dt`` (the best ``dt`` can hold).

    With ``trial``, on inputs moved by a rounding-sized amount first (see TRIALS). With
    ``like`` (the result in ``dt``), each output is rounded to that output's dtype instead:
    an output that is float64 by design (``float_power``) stays float64.
    """
    import torch
    from torch.utils import _pytree
    s64 = convert(sample, dt, wide, "cpu")
    if trial is not None:
        s64 = _perturb(s64, wide, torch.finfo(dt).eps, trial)
    out = _evaluate(op, s64, pass_, 0, dt)
    if like is not None:
        leaves, spec = _pytree.tree_flatten(out)
        shapes = _pytree.tree_flatten(like)[0]
        if len(shapes) == len(leaves):
            return _pytree.tree_unflatten(
                [x.to(t.dtype) if isinstance(x, torch.Tensor) and x.dtype == wide and isinstance(t, torch.Tensor)
                 else x for x, t in zip(leaves, shapes)], spec)
    return _round(out, wide, dt)


# --------------------------------------------------------------------------- judging

def judge(result: dict) -> Verdict:
    """The check's status and metrics from a run_case result (or a sandbox failure)."""
    tol = result.get("tolerance") or {}
    metrics = {"reference": result.get("reference"), "samples": result.get("samples", 0),
               "compared": result.get("compared", 0), "rtol": tol.get("rtol"), "atol": tol.get("atol"),
               "tolerance_source": tol.get("source")}
    if result.get("inputs"):  # one digest per sample, in order (see fingerprint)
        metrics["inputs"] = " ".join(result["inputs"])
    for key in ("random", "no_grad", "no_reference"):
        if result.get(key):
            metrics[f"samples_{key}"] = result[key]
    declared = result.get("declared")
    if declared and declared[0] == "skip":
        return Verdict("skip", "parity", f"PyTorch does not compare this op with the CPU: {declared[1]}", metrics)
    if result.get("error"):
        return Verdict("skip", "parity", f"no result to compare (see the ops suite): {result['error']}", metrics)
    verdict = result.get("verdict")
    if verdict is None:
        why = ("its output is drawn from the RNG" if result.get("random")
               else "no sample has a differentiable output" if result.get("no_grad")
               else "the op has no float64 kernel for a reference" if result.get("no_reference")
               else "the op has no samples")
        return Verdict("skip", "parity", f"nothing comparable: {why}", metrics)
    on_target = result.get("kind", "cpu") != "cpu"
    metrics.update({k: verdict[k] for k in ("max_abs_err", "max_rel_err", "margin") if k in verdict})
    if isinstance(verdict.get("sample"), int):
        metrics["worst_sample"] = verdict["sample"]
    for key in ("elementwise_margin", "rule", "cause", "cause_what", "switch", "fallback_ops"):
        if verdict.get(key) not in (None, [], ""):
            metrics[key] = verdict[key]
    if on_target:
        metrics["accuracy_source"] = tolerances.ACCURACY_SOURCE
        if result.get("ties"):
            metrics["ties_settled"] = result["ties"]
        if result.get("vs_cpu"):  # same-dtype agreement with the CPU: recorded, not judged
            metrics["vs_cpu_max_abs_err"] = result["vs_cpu"]["max_abs_err"]
            metrics["vs_cpu_margin"] = result["vs_cpu"]["margin"]
    for side in ("target_ref", "cpu_ref"):
        if result.get(side):
            metrics[f"{side}_err"] = result[side]["max_abs_err"]
    if metrics.get("target_ref_err") is not None and metrics.get("cpu_ref_err") is not None:
        t, c = metrics["target_ref_err"], metrics["cpu_ref_err"]
        metrics["more_accurate"] = "same" if t == c else ("target" if t < c else "cpu")
    known = declared and declared[0] == "xfail"
    if verdict["ok"]:
        note = ""
        if result.get("cpu_off"):
            off = result["cpu_off"]
            metrics["cpu_finding"] = off
            note = (f"the CPU is the inaccurate side: sample {off['sample']} is off float64 by {off['cpu_err']:.3g} "
                    f"on the CPU (margin {off['cpu_margin']:.3g}) and by {off['target_err']:.3g} on the target")
        if known:
            return Verdict("xpass", "parity", "PyTorch's test_compare_cpu expects this op to differ from the CPU here (it "
                             "asks same-dtype agreement); judged by its accuracy against float64, it passes"
                             + (f"; {note}" if note else ""), metrics)
        return Verdict("pass", "parity", note, metrics)
    against = "float64" if result.get("reference") in ("float64", "complex128") else result.get("reference")
    if verdict.get("cause"):
        cpu_err = verdict.get("cpu_max_abs_err")
        message = (f"sample {verdict.get('sample')}: {verdict['cause_what']}: off {against} by "
                   f"{verdict['max_abs_err']:.3g}" + (f" ({cpu_err:.3g} on the CPU)" if cpu_err is not None else "")
                   + f", margin {verdict['margin']:.3g}; {verdict['switch']}. {verdict['reason']}")
    else:
        message = (f"sample {verdict.get('sample')}: max_abs_err {verdict['max_abs_err']:.3g}, margin "
                   f"{verdict['margin']:.3g} at rtol={tol.get('rtol')} atol={tol.get('atol')} "
                   f"against {against}: {verdict['reason']}")
    if known:
        return Verdict("xfail", "parity", f"PyTorch's test_compare_cpu expects a mismatch here; {message}", metrics)
    if result.get("known_limit"):
        return Verdict("xfail", "parity", f"known float32 limit against float64 ({result['known_limit']}); {message}",
                         metrics)
    limit = verdict.get("precision_limit")
    if limit:
        metrics.update(precision_limit=limit, float32_margin=verdict.get("float32_margin"))
        why = ("float32 on the same inputs meets the reference: the dtype is too narrow here"
               if limit == "narrow-dtype" else
               "float32 on the same inputs misses it too: the op is ill-conditioned or discontinuous here")
        return Verdict("xfail", "parity", f"precision limit ({why}); {message}", metrics)
    return Verdict("fail", "parity", message, metrics)
