"""Comparing a result with its reference: the verdict and the margins behind it.

Two rules, both ``|actual - expected| <= atol + rtol * scale``:

  elementwise  scale = |expected| of the same element: ``torch.testing.assert_close``'s
               rule and its verdict (what a device-vs-CPU comparison in one dtype asks)
  normwise     scale = max |expected| over the whole output tensor: the rule for a sum
               against a higher-precision reference. In float16 a dot product whose large
               terms cancel loses most of its digits to the rounding *of the terms*, so
               its error relative to the (small) result says nothing about the kernel;
               its error relative to the tensor's magnitude does. A computation that sums
               nothing (every aten op pointwise) has no such excuse: the caller withholds
               the rule there (harness.parity.ops.check.accumulates), or a kernel wrong on
               every element under rtol * max |expected| would pass.

A third term serves a result judged against an exact (float64) reference: ``slack``,
an allowed extra error per element, is how far the reference itself moves when the
inputs move by a few units in the last place of the low-precision dtype (see
harness.parity.ops.samples). An element whose slack is infinite may differ in anything, even NaN
or inf, because a rounding-sized change of the inputs changes it that much.

Under every rule, NaN positions must agree, inf positions and signs too, and integer and bool
results must be equal. The measurements are what a matrix shows, so a reader sees how
close a pass was:

  max_abs_err  largest |actual - expected| over finite elements
  max_rel_err  largest |actual - expected| / |expected| where expected != 0
  margin       largest |actual - expected| / allowed error: <= 1 passes; 0.5 means half
               the allowed error was used; 3.0 means three times too much
"""
from __future__ import annotations

import math

import torch
from torch.utils import _pytree

from harness.parity.numerics.tolerances import Tolerance


def _leaves(tree) -> list:
    return [x for x in _pytree.tree_leaves(tree) if isinstance(x, (torch.Tensor, int, float, complex, bool))]


def compare(actual, expected, tol, normwise: bool = False, slack=None, check_dtype: bool = False,
            yardstick: str = "the CPU") -> dict:
    """Compare two outputs (tensors or nested structures of them) under ``tol``: a
    Tolerance, or a function of an output's dtype name ("float32") giving one.

    ``slack``, if given, has the structure of ``expected``: a per-element allowed extra
    error (``slack_of``); it applies to the elementwise rule. ``check_dtype``: each tensor
    must also have ``expected``'s dtype (``dtype_differs``), for a device's result against
    the CPU's with no float64 reference (integer inputs); a result against float64 has
    another dtype by construction. ``yardstick``: what that reason calls ``expected``.
    """
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    s_leaves = _leaves(slack) if slack is not None else [None] * len(e_leaves)
    tol_of = tol if callable(tol) else (lambda dtype: tol)
    first = next((tol_of(str(_dense(e).dtype).removeprefix("torch.")) for e in e_leaves
                  if _dense(e).is_floating_point() or _dense(e).is_complex()), None) if callable(tol) else tol
    result = {"rtol": first.rtol if first else 0.0, "atol": first.atol if first else 0.0, "max_abs_err": 0.0,
              "max_rel_err": 0.0, "margin": 0.0, "elements": 0, "ok": True, "reason": "",
              "rule": "normwise" if normwise else "elementwise"}
    if len(a_leaves) != len(e_leaves):
        return {**result, "ok": False, "reason": f"{len(a_leaves)} outputs against {len(e_leaves)} expected"}
    if len(s_leaves) != len(e_leaves):
        raise ValueError("slack must have the structure of expected")
    if slack is not None:
        result["rule"] = "elementwise+sensitivity"
    for i, (a, e, s) in enumerate(zip(a_leaves, e_leaves, s_leaves)):
        a_t, e_t = _dense(a), _dense(e)
        exact = not (e_t.is_floating_point() or e_t.is_complex())
        leaf = None if exact else tol_of(str(e_t.dtype).removeprefix("torch."))
        leaf_tol = (0.0, 0.0) if exact else (leaf.rtol, leaf.atol)
        problem = _structure(a_t, e_t)
        mismatch = dtype_differs(a, e, yardstick) if check_dtype else None
        if problem is None and s is not None:
            s_t = _dense(s).to(torch.float64)
            _measure(a_t, e_t, leaf_tol, False, result, s_t)
            problem = _with_slack(a_t, e_t, leaf_tol, s_t)
        elif problem is None:
            _measure(a_t, e_t, leaf_tol, normwise and not exact, result)
            problem = _values(a_t, e_t, leaf_tol, normwise and not exact)
        problem = mismatch or problem
        if problem and result["ok"]:
            result["ok"] = False
            where = f"output {i}: " if len(a_leaves) > 1 else ""
            result["reason"] = (where + " ".join(problem.split()))[:300]
    return result


def _dense(x) -> torch.Tensor:
    t = torch.as_tensor(x).detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.cpu()


def dtype_differs(actual, cpu, yardstick: str = "the CPU") -> str | None:
    """Why a target's output leaf is not of the dtype the CPU gives for the same call (None
    where it is, or where either is no tensor): int32 indices where the CPU's are int64, uint8
    where it gives bool, float16 where it gives float32. The values may all agree and still
    the result is another one: indexing, masking and overflow follow the dtype."""
    if not (isinstance(actual, torch.Tensor) and isinstance(cpu, torch.Tensor)) or actual.dtype == cpu.dtype:
        return None
    want = _dtype_name(cpu.dtype)
    return (f"dtype {_dtype_name(actual.dtype)} where {yardstick} gives {want} for the same call: code written for "
            f"{want} (indexing, masks, overflow) behaves otherwise here; cast with .to(torch.{want}) until the "
            "kernel returns it")


def _structure(a: torch.Tensor, e: torch.Tensor) -> str | None:
    if a.shape != e.shape:
        return f"shape {tuple(a.shape)} against {tuple(e.shape)}"
    return None


def _values(a: torch.Tensor, e: torch.Tensor, tol: tuple[float, float], normwise: bool) -> str | None:
    """Why ``a`` is not close to ``e`` (None when it is)."""
    rtol, atol = tol
    if not normwise:
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                                       check_dtype=False, check_layout=False, check_stride=False)
        except AssertionError as exc:
            return str(exc)
        return None
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    if not torch.equal(torch.isnan(a64), torch.isnan(e64)):
        return f"NaN positions differ ({int(torch.isnan(a64).sum())} against {int(torch.isnan(e64).sum())})"
    inf_a, inf_e = torch.isinf(a64), torch.isinf(e64)
    if not torch.equal(inf_a, inf_e) or not torch.equal(a64[inf_a], e64[inf_e]):
        return "inf positions or signs differ"
    finite = torch.isfinite(e64)
    if not bool(finite.any()):
        return None
    diff = (a64 - e64).abs()[finite]
    allowed = atol + rtol * float(e64.abs()[finite].max())
    worst = float(diff.max())
    if worst > allowed:
        bad = int((diff > allowed).sum())
        return (f"normwise: {bad} / {diff.numel()} elements off by more than {allowed:.3g} "
                f"(atol + rtol * max|expected|); greatest difference {worst:.3g}")
    return None


def slack_of(reference, perturbed: list) -> object:
    """Per element, how far ``reference`` moves across ``perturbed`` reruns (same structure).

    An element whose finiteness changes in some rerun gets an infinite slack.
    """
    def one(ref, *others):
        if not isinstance(ref, torch.Tensor):
            return ref
        r = _dense(ref)
        wide = torch.complex128 if r.is_complex() else torch.float64
        r64, out = r.to(wide), torch.zeros(r.shape, dtype=torch.float64)
        for o in others:
            o64 = _dense(o).to(wide)
            if o64.shape != r64.shape:
                return torch.full(r.shape, math.inf, dtype=torch.float64)
            same = (torch.isfinite(o64) == torch.isfinite(r64)) & ((o64 == r64) | torch.isfinite(r64) | (torch.isnan(o64) & torch.isnan(r64)))
            moved = torch.where(torch.isfinite(r64) & torch.isfinite(o64), (o64 - r64).abs(), 0.0)
            out = torch.maximum(out, torch.where(same, moved, math.inf))
        return out
    return _pytree.tree_map(one, reference, *perturbed)


def _with_slack(a: torch.Tensor, e: torch.Tensor, tol: tuple[float, float], slack: torch.Tensor) -> str | None:
    rtol, atol = tol
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    free = torch.isinf(slack)
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(a64) & torch.isinf(e64) & (a64 == e64)
    finite = torch.isfinite(a64) & torch.isfinite(e64)
    if bool((~(free | both_nan | same_inf | finite)).any()):
        return "NaN or inf positions differ where a rounding-sized change of the inputs does not change them"
    diff = torch.where(finite, (a64 - e64).abs(), 0.0)
    allowed = atol + rtol * torch.where(finite, e64.abs(), 0.0) + torch.where(free, 0.0, slack)
    bad = (diff > allowed) & ~free
    if bool(bad.any()):
        return (f"{int(bad.sum())} / {a.numel()} elements differ by more than atol + rtol * |expected| + the "
                f"reference's own sensitivity to rounding-sized input changes; greatest excess "
                f"{float((diff - allowed)[bad].max()):.3g}")
    return None


def _measure(a: torch.Tensor, e: torch.Tensor, tol: tuple[float, float], normwise: bool, out: dict,
             slack: torch.Tensor | None = None) -> None:
    if a.numel() == 0:
        return
    rtol, atol = tol
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    finite = torch.isfinite(a64) & torch.isfinite(e64)
    if slack is not None:
        finite &= torch.isfinite(slack)
    out["elements"] += int(a.numel())
    if not bool(finite.any()):
        return
    diff = (a64 - e64).abs()[finite]
    mag = e64.abs()[finite]
    out["max_abs_err"] = max(out["max_abs_err"], float(diff.max()))
    nonzero = mag > 0
    if bool(nonzero.any()):
        out["max_rel_err"] = max(out["max_rel_err"], float((diff[nonzero] / mag[nonzero]).max()))
    allowed = atol + rtol * (mag.max() if normwise else mag)
    if slack is not None:
        allowed = allowed + slack[finite]
    used = torch.where(allowed > 0, diff / torch.as_tensor(allowed).clamp_min(1e-300),
                       torch.where(diff > 0, math.inf, 0.0))
    out["margin"] = max(out["margin"], float(used.max()))


# --------------------------------------------------------------------------- NaN and inf

def _dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


def _rounded_like(reference: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """The float64 ``reference`` as ``result``'s dtype holds it: where the exact value is past
    the dtype's range, inf is the right answer (float16 holds at most 65504)."""
    if result.dtype != reference.dtype and (result.is_floating_point() or result.is_complex()):
        return reference.to(result.dtype)
    return reference


def non_finite(actual, reference, slack=None) -> int:
    """How many elements of ``actual`` (a tensor or a structure of them) are NaN or inf where
    ``reference``, rounded to ``actual``'s dtype, is a finite number, not counting elements
    the reference itself is free at (infinite ``slack``: a rounding-sized change of the
    inputs makes it NaN or inf).

    Such an element is never a precision limit: rounding loses digits, it does not make a
    NaN, and a half-precision result that overflows where the exact one fits in the dtype
    is a kernel that keeps an intermediate too narrow."""
    a_leaves, r_leaves = _leaves(actual), _leaves(reference)
    s_leaves = _leaves(slack) if slack is not None else [None] * len(r_leaves)
    count = 0
    for a, r, s in zip(a_leaves, r_leaves, s_leaves):
        a_t, r_t = _dense(a), _dense(r)
        if not (a_t.is_floating_point() or a_t.is_complex()) or a_t.shape != r_t.shape:
            continue
        wrong = ~torch.isfinite(a_t) & torch.isfinite(_rounded_like(r_t, a_t))
        if s is not None:
            wrong &= ~torch.isinf(_dense(s))
        count += int(wrong.sum())
    return count


def non_finite_shared(actual, other, reference) -> int:
    """Of ``non_finite(actual, reference)``'s elements, how many ``other`` (the CPU's result
    of the same inputs, in the same precision) gives as NaN or inf too: all of them, and the
    failure is the computation's in that precision, not the device's alone."""
    count = 0
    for a, o, r in zip(_leaves(actual), _leaves(other), _leaves(reference)):
        a_t, o_t, r_t = _dense(a), _dense(o), _dense(r)
        if not (a_t.is_floating_point() or a_t.is_complex()) or not a_t.shape == o_t.shape == r_t.shape:
            continue
        wrong = ~torch.isfinite(a_t) & torch.isfinite(_rounded_like(r_t, a_t))
        count += int((wrong & ~torch.isfinite(o_t)).sum())
    return count


def set_aside_shared(actual: torch.Tensor, other: torch.Tensor, reference: torch.Tensor):
    """``actual`` and ``other`` (tensors of one shape) with the elements both give as NaN or inf,
    where ``reference`` rounded to their dtype is a number, set to that number: the NaN
    ``non_finite_shared`` counts, set aside so that the rest is judged as any result is.
    Anything else (not floating, another shape) comes back as it is."""
    if not all(isinstance(t, torch.Tensor) for t in (actual, other, reference)) or not (
            actual.is_floating_point() or actual.is_complex()) or not actual.shape == other.shape == reference.shape \
            or actual.layout != torch.strided:
        return actual, other
    rounded = _rounded_like(reference, actual)
    both = ~torch.isfinite(actual) & ~torch.isfinite(other) & torch.isfinite(rounded).to(actual.device)
    if not bool(both.any()):
        return actual, other
    return (torch.where(both, rounded.to(actual.dtype).to(actual.device), actual),
            torch.where(both.to(other.device), rounded.to(other.dtype).to(other.device), other))


# --------------------------------------------------------------------------- accuracy on an accelerator

def ulp(magnitude: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at each ``magnitude`` (float64): the spacing of
    ``dtype``'s values there; below its smallest normal, the smallest subnormal. A complex
    dtype's is its real part's."""
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
    fi = torch.finfo(real.get(dtype, dtype))
    mag = magnitude.abs().to(torch.float64)
    bits = round(-math.log2(fi.eps))                     # stored mantissa bits: 23, 10, 7
    _, exponent = torch.frexp(mag)                        # mag = m * 2**exponent, 0.5 <= m < 1
    spacing = torch.ldexp(torch.ones_like(mag), exponent - 1 - bits)
    smallest = fi.tiny * fi.eps
    return torch.where(mag < fi.tiny, torch.full_like(mag, smallest), spacing)


def compare_accuracy(target, cpu, reference, tol: Tolerance, dtype: torch.dtype, factor: float, ulps: float,
                     slack=None, normwise: bool = True, yardstick: str = "the CPU", check_dtype: bool = True) -> dict:
    """The target's result judged by its accuracy: against the float64 ``reference`` (rounded
    to ``dtype``), with the CPU's result in the same dtype as the yardstick.

    Per floating element, the target's error |t - r| may be up to the larger of
      the CPU target's rules   atol + rtol * |r| (+ the reference's own sensitivity, ``slack``)
      the CPU's own accuracy   ``factor`` * |c - r| + ``ulps`` units in the last place at r of the
                               output's dtype (``dtype``, the case's, where the output is float64)
    or, for the whole output, the normwise rule atol + rtol * max|r| (unless ``normwise`` is
    False: where the cpu target is judged elementwise only). So a target passes
    when it meets the rules a correct CPU kernel meets, or is no less accurate than the CPU
    (within the factor and a rounding or two more); it fails only outside both. NaN or
    inf where float64, rounded to the output's dtype, is a number fails whatever the CPU
    gives there, and is counted in ``non_finite`` (a cause of its own:
    harness.parity.numerics.causes); any other non-finite element must match the
    reference's (rounded or not) or the CPU's (NaN for NaN, inf for inf of the same sign),
    or sit where the reference itself is free (infinite slack). Integer and bool outputs
    must equal the CPU's (ties are the caller's business). Every output tensor must have the
    CPU's dtype (``dtype_differs``), whatever its values: the reference's dtype is float64 by
    construction and is not asked. ``check_dtype`` False leaves the dtype out, for runs under
    ``torch.autocast``, whose output dtypes each device's own autocast policy decides.

    Besides ``compare``'s fields: ``cpu_max_abs_err`` (the CPU against the reference),
    ``rule``: "float64-rules" when every element met the CPU target's rules, "as-accurate-as-cpu"
    when some element needed the CPU's own error, "normwise" when some element passed only by
    the whole-output rule (a caller whose computation sums nothing withholds that rule:
    harness.parity.ops.check.accumulates), and with ``non_finite`` its share ``non_finite_on_cpu``: how many of
    those elements the CPU gives as NaN or inf too (all of them: the op in this dtype fails
    there whatever the device; none: the device alone).

    ``yardstick``: what the reasons call the ``cpu`` side, for a caller whose yardstick is
    another run (torch.compile's checks pass eager on the same device: "eager"); the
    metrics keep their names.
    """
    t_leaves, c_leaves, r_leaves = _leaves(target), _leaves(cpu), _leaves(reference)
    s_leaves = _leaves(slack) if slack is not None else [None] * len(r_leaves)
    result = {"rtol": tol.rtol, "atol": tol.atol, "max_abs_err": 0.0, "max_rel_err": 0.0, "margin": 0.0,
              "cpu_max_abs_err": 0.0, "elements": 0, "ok": True, "reason": "", "rule": "float64-rules"}
    if not len(t_leaves) == len(c_leaves) == len(r_leaves) == len(s_leaves):
        return {**result, "ok": False, "reason": f"{len(t_leaves)} outputs against {len(r_leaves)} expected"}
    for i, (t, c, r, s) in enumerate(zip(t_leaves, c_leaves, r_leaves, s_leaves)):
        t_t, c_t, r_t = _dense(t), _dense(c), _dense(r)
        if not (r_t.is_floating_point() or r_t.is_complex()):
            problem = _structure(t_t, c_t) or _values(t_t, c_t, (0.0, 0.0), False)
            _measure(t_t, c_t, (0.0, 0.0), False, result)
        else:
            problem = _structure(t_t, r_t) or _structure(c_t, r_t) or _accurate(
                t_t, c_t, r_t, None if s is None else _dense(s).to(torch.float64), tol, dtype, factor, ulps, result,
                normwise, yardstick)
        problem = (dtype_differs(t, c, yardstick) if check_dtype else None) or problem
        if problem and result["ok"]:
            where = f"output {i}: " if len(t_leaves) > 1 else ""
            result["ok"], result["reason"] = False, (where + " ".join(problem.split()))[:300]
    return result


def _accurate(t, c, r, slack, tol: Tolerance, dtype, factor: float, ulps: float, out: dict,
              normwise: bool = True, yardstick: str = "the CPU") -> str | None:
    wide = torch.complex128 if (t.is_complex() or r.is_complex()) else torch.float64
    t64, c64, r64 = t.to(wide), c.to(wide), r.to(wide)
    out["elements"] += int(t.numel())
    if t.numel() == 0:
        return None
    free = torch.isinf(slack) if slack is not None else torch.zeros(r.shape, dtype=torch.bool)
    fin = torch.isfinite(t64) & torch.isfinite(r64)

    def same(a, b):  # non-finite a matching b: NaN for NaN, inf for the same inf
        return (torch.isnan(a) & torch.isnan(b)) | (torch.isinf(a) & (a == b))
    rounded = _rounded_like(r, t).to(wide)
    wrong = ~torch.isfinite(t64) & torch.isfinite(rounded) & ~free
    if bool(wrong.any()):  # never excused, not even by a CPU that gives NaN there too
        bad = int(wrong.sum())
        out["non_finite"] = out.get("non_finite", 0) + bad
        out["margin"] = math.inf   # no allowed error covers a NaN
        shared = int((wrong & ~torch.isfinite(c64)).sum())
        out["non_finite_on_cpu"] = out.get("non_finite_on_cpu", 0) + shared
        return (f"{bad} element(s) NaN or inf where float64, rounded to {_dtype_name(t.dtype)}, is a number"
                + (f" ({yardstick} gives NaN or inf at {shared} of them too)" if shared else f" ({yardstick} does not)"))
    cpu_like = same(t64, c64) | (torch.isfinite(t64) & torch.isfinite(c64) & (t64 == c64))
    odd = ~(fin | same(t64, r64) | same(t64, rounded) | cpu_like | free)
    if bool(odd.any()):
        # Two kinds, each told as it is: the target's NaN or inf where float64, rounded, is
        # another NaN or inf (a number there was ``wrong``, above); and the target's number
        # where float64 is NaN or inf, which is no NaN of the target's (float16's 65504 where
        # an exact 7e4 rounds to inf; 0 where float64 gives NaN).
        name, said = _dtype_name(t.dtype), []
        own = odd & ~torch.isfinite(t64)
        if bool(own.any()):
            said.append(f"{int(own.sum())} element(s) NaN or inf where float64, rounded to {name}, is another NaN "
                        f"or inf (NaN for inf, or inf of the other sign; {yardstick} does not give the same there)")
        finite = odd & torch.isfinite(t64)
        if bool(finite.any()):
            bad, shared = int(finite.sum()), int((finite & ~torch.isfinite(c64)).sum())
            said.append(f"{bad} element(s) finite where float64, rounded to {name}, is NaN or inf"
                        + (f", and {yardstick} gives NaN or inf there too" if shared == bad else
                           f" ({yardstick} gives NaN or inf at {shared} of them, other numbers at the rest)" if shared
                           else f" ({yardstick} gives other numbers there)"))
        return "; ".join(said)
    judged = fin & ~free
    if not bool(judged.any()):
        return None
    err = (t64 - r64).abs()[judged]
    mag = r64.abs()[judged]
    cpu_err = torch.where(torch.isfinite(c64), (c64 - r64).abs(), math.inf)[judged]
    rules = tol.atol + tol.rtol * mag + (slack[judged] if slack is not None else 0.0)
    # Where the CPU gives NaN or inf and float64 a number, the CPU's accuracy is no yardstick: an
    # infinite error there would excuse any number the target gives, so the target meets the rules.
    as_cpu = (factor * torch.where(torch.isfinite(cpu_err), cpu_err, 0.0)
              + ulps * ulp(mag, t.dtype if t.dtype != wide else dtype))  # the output's own units
    allowed = torch.maximum(rules, as_cpu)
    whole = tol.atol + tol.rtol * float(mag.max()) if normwise else 0.0
    margin_each = float((err / allowed.clamp_min(1e-300)).max())
    margin = min(margin_each, float(err.max()) / whole if whole > 0 else math.inf)
    out["max_abs_err"] = max(out["max_abs_err"], float(err.max()))
    nonzero = mag > 0
    if bool(nonzero.any()):
        out["max_rel_err"] = max(out["max_rel_err"], float((err[nonzero] / mag[nonzero]).max()))
    finite_cpu = torch.isfinite(cpu_err)
    if bool(finite_cpu.any()):
        out["cpu_max_abs_err"] = max(out["cpu_max_abs_err"], float(cpu_err[finite_cpu].max()))
    out["margin"] = max(out["margin"], margin)
    if margin_each > 1 >= margin:   # only the whole-tensor rule passes it: said, so a caller can withhold it
        out["rule"] = "normwise"
    elif bool((err > rules).any()) and float(err.max()) > whole and out["rule"] != "normwise":
        out["rule"] = "as-accurate-as-cpu"
    if margin > 1:
        bad = int((err > allowed).sum())
        return (f"{bad} / {t.numel()} elements off float64 by more than both the tolerance table's rules and "
                f"{factor:g} x {yardstick}'s own error + {ulps:g} ulp; greatest error {float(err.max()):.3g} "
                f"({yardstick}'s {float(cpu_err[finite_cpu].max()) if bool(finite_cpu.any()) else math.inf:.3g})")
    return None
