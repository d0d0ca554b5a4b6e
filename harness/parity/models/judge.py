"""Whole-model parity's judge: how each side's numbers are compared, and the verdict on them.

Measuring (``measure``, ``measure_accuracy``, ``compare_gradients``, ``generation_record``)
takes tensors and runs in the sandbox child (harness.parity.models.runs), which returns a
``StepRun``, ``TrainRun`` or ``GenerationRun`` of plain data. The rules (a gradient out of
tolerance, a tie or a divergence in greedy tokens, a loss curve past its bound) are pure
functions of plain data: the child applies them to decide whether to diagnose a cause, and
the pytest process applies them again, with the tolerances of
harness.parity.numerics.tolerances, to turn a run into a ``Verdict``
(``judge_forward_backward``, ``judge_training_run``, ``judge_generation_run``): status pass
or fail, category parity, the record's metrics, and a message that says what differs, then the
cause and its switch where one was diagnosed (harness.parity.numerics.causes,
records.with_cause) and the tolerance otherwise.
"""
from __future__ import annotations

import dataclasses
import math

from harness.core.records import Category, Status, Verdict, with_cause
from harness.parity.numerics import causes, tolerances
from harness.parity.numerics.tolerances import Tolerance

CATEGORY = Category.PARITY


# --------------------------------------------------------------------------- what a run returns

@dataclasses.dataclass
class StepRun:
    """One forward and backward pass on the target against its reference (``runs.forward_backward``).

    ``output`` and ``loss`` are comparisons in brief (ok, max_abs_err, max_rel_err, margin,
    reason; the loss also its value and the reference's); ``grads`` one entry per parameter
    (``compare_gradients``). On an accelerator ``vs_cpu`` (the target against the CPU,
    recorded, not judged) and ``vs_float64`` (both float32 sides against float64) too, and
    ``diagnosis`` the cause of a failure (cause, cause_what, switch). ``dtype``: what the
    target computed in (an autocast half dtype, or float32); ``non_finite``: its NaN or inf
    where float64 has numbers; ``cpu_finding``: on an accelerator that passed, the CPU's own
    miss of float64's rules in the same precision (a finding about the CPU, kept apart)."""
    model: str
    target: str
    reference: str
    output_name: str
    output: dict
    loss: dict
    grads: list
    without_grad: list
    scale: float
    vs_cpu: dict | None = None
    vs_float64: dict | None = None
    diagnosis: dict = dataclasses.field(default_factory=dict)
    dtype: str = "float32"
    non_finite: int = 0
    non_finite_on_cpu: int | None = None   # of them, NaN or inf in the CPU's run too (None: no CPU run)
    cpu_finding: dict | None = None
    setting: dict = dataclasses.field(default_factory=dict)   # what the run compared, recorded as metrics


@dataclasses.dataclass
class TrainRun:
    """The loss curves of a few AdamW steps on every side (``runs.train``): ``losses`` maps
    each side (target, cpu on an accelerator, float64) to its curve. Under autocast
    (harness.parity.models.precision) ``skipped`` lists, per side, the steps GradScaler
    skipped (float16), which the float64 reference skips too, and ``scales`` the target's
    loss scale after each step."""
    model: str
    target: str
    reference: str
    lr: float
    steps: int
    batches: list
    losses: dict
    diagnosis: dict = dataclasses.field(default_factory=dict)
    dtype: str = "float32"
    non_finite: int = 0
    non_finite_on_cpu: int | None = None   # of those steps, NaN or inf on the CPU's curve too
    skipped: dict | None = None
    scales: list | None = None
    note: str = ""


@dataclasses.dataclass
class GenerationRun:
    """Greedy generation on the target and its reference (``runs.generate``; the fields of
    ``generation_record``)."""
    model: str
    target: str
    reference: str
    new_tokens: int
    tokens: list
    reference_tokens: list
    reference_top: list
    reference_gap: list
    comparable: list
    scores: dict
    diagnosis: dict = dataclasses.field(default_factory=dict)
    dtype: str = "float32"
    non_finite: int = 0
    non_finite_on_cpu: int | None = None   # of them, NaN or inf in the CPU's scores too (None: no CPU run)
    yardstick: "GenerationRun | None" = None   # half precision on an accelerator: the CPU's own run, judged alike
    setting: dict = dataclasses.field(default_factory=dict)   # what the run was (long_tokens and why ...)


def run_in_child(sandbox, record, entry: str, *args):
    """What a model check's run gave in the sandbox child (``entry``: ``module:function``);
    a crash or a hang ends the check there, recorded as such (under parity). A string is why
    the target does not offer what the check needs (a dtype, autocast): a skip with that
    reason, which ends the check too."""
    record.category = CATEGORY
    value = record.value_of(sandbox.call(entry, *args), "the run itself")
    if isinstance(value, str):
        record.conclude(Verdict(Status.SKIP, Category.NA, value))
    return value


def as_tolerance(pair) -> Tolerance:
    """A Tolerance from an (rtol, atol) pair, the form a tolerance crosses into the sandbox child in."""
    rtol, atol = pair
    return Tolerance(float(rtol), float(atol), "")


# --------------------------------------------------------------------------- measuring

def _grad_entry(name: str, actual, expected, scale: float, tol: Tolerance) -> dict:
    """One parameter's gradient against the reference, normwise (see compare_gradients)."""
    from harness.parity.numerics import accuracy
    if actual is None or expected is None:
        return {"name": name, "ok": False, "margin": float("inf"), "max_abs_err": float("nan"),
                "rel_err": float("nan"), "scale": 0.0,
                "reason": f"no gradient on the {'target' if actual is None else 'reference'} side"}
    own = float(expected.abs().max()) if expected.numel() else 0.0
    actual, expected = rows_in_use(actual, expected)
    got = accuracy.compare(actual, expected, Tolerance(tol.rtol, tol.atol * scale, tol.source), normwise=True)
    err = got["max_abs_err"]
    return {"name": name, "ok": got["ok"], "margin": got["margin"], "max_abs_err": err,
            "rel_err": err / own if own else (float("inf") if err else 0.0), "scale": own, "reason": got["reason"]}


ROWS_IN_USE_FROM = 1024   # a gradient with this many rows or more is compared on the rows in use


def rows_in_use(actual, expected):
    """An embedding table's gradient on the rows a batch touched: the rows where either side
    has an element that is not zero (a NaN counts). The rows left out are zero on both
    sides, so the normwise verdict and every error are the same; the comparison is not:
    MiniLM's 30,522-row table made most of a forward/backward check's time (measured: 9 of
    13 s on a loaded 2-core VM, for about 30 rows in use)."""
    if actual.dim() < 2 or actual.shape != expected.shape or actual.shape[0] < ROWS_IN_USE_FROM:
        return actual, expected
    used = (actual != 0).flatten(1).any(1) | (expected != 0).flatten(1).any(1)
    if bool(used.all()):
        return actual, expected
    return actual[used], expected[used]


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


def measure(actual: dict, expected: dict, out_tol: Tolerance, grad_tol: Tolerance, normwise: bool = False) -> dict:
    """One side's step (output, loss, grads: harness.parity.models.runs) against another's:
    output and loss elementwise under ``out_tol`` (``normwise``: relative to the output's
    largest value, the rule in half precision), gradients normwise (``compare_gradients``)."""
    from harness.parity.numerics import accuracy
    return {"output": _summary(accuracy.compare(actual["output"], expected["output"], out_tol, normwise=normwise)),
            "loss": {**_summary(accuracy.compare(actual["loss"], expected["loss"], out_tol, normwise=normwise)),
                     "value": float(actual["loss"]), "reference": float(expected["loss"])},
            **compare_gradients(actual["grads"], expected["grads"], grad_tol)}


def side_summary(measured: dict) -> dict:
    """A ``measure`` in brief for the float64 side-by-side: output and loss errors, and the
    gradient with the largest normwise error."""
    worst = max(measured["grads"], key=lambda g: g["margin"], default=None)
    return {"output_max_abs_err": measured["output"]["max_abs_err"], "loss_abs_err": measured["loss"]["max_abs_err"],
            "grad_worst": worst["name"] if worst else None, "grad_worst_rel_err": worst["rel_err"] if worst else None}


def measure_accuracy(runs: dict, out_tol: Tolerance, grad_tol: Tolerance, dtype: str = "float32",
                     normwise: bool = False, yardstick: str = "the CPU") -> dict:
    """The target's output, loss and gradients judged by their accuracy against float64,
    the CPU's run in the same precision (``dtype``: float32, or the autocast half dtype) as
    the yardstick: output and loss by accuracy.compare_accuracy (elementwise, or also
    ``normwise`` in half precision); a gradient passes normwise against float64
    (compare_gradients) or when its error is within ACCURACY_FACTOR x the CPU's +
    ACCURACY_ULPS units in the last place of float32 (the gradients' dtype) at its largest
    element. ``yardstick``: what the reasons call the ``cpu`` run (accuracy.compare_accuracy).
    Output and loss must have the CPU's dtypes in float32; under autocast each device's own
    policy decides them (autocast keeps its lists of float32 ops per device), so there
    they are not asked."""
    import torch

    from harness.parity.numerics import accuracy
    t, c, r = runs["target"], runs["cpu"], runs["float64"]

    def accurate(key: str) -> dict:   # under autocast, the output's dtype is each device's autocast policy
        return accuracy.compare_accuracy(t[key], c[key], r[key], out_tol, getattr(torch, dtype),
                                       tolerances.ACCURACY_FACTOR, tolerances.ACCURACY_ULPS, normwise=normwise,
                                       yardstick=yardstick, check_dtype=dtype == "float32")
    grads = compare_gradients(t["grads"], r["grads"], grad_tol)
    cpu_grads = {g["name"]: g for g in compare_gradients(c["grads"], r["grads"], grad_tol)["grads"]}
    for g in grads["grads"]:
        yard = cpu_grads.get(g["name"])
        if g["ok"] or yard is None or not (g["max_abs_err"] == g["max_abs_err"]):  # NaN: no gradient
            continue
        if accuracy.non_finite(t["grads"].get(g["name"]), r["grads"].get(g["name"])):
            continue   # NaN or inf where float64 has a number: no error of the CPU's excuses it (the errors skip them)
        unit = float(accuracy.ulp(torch.tensor([g["scale"]], dtype=torch.float64), torch.float32)[0])
        allowed = tolerances.ACCURACY_FACTOR * yard["max_abs_err"] + tolerances.ACCURACY_ULPS * unit
        if g["max_abs_err"] <= allowed:
            g.update(ok=True, margin=g["max_abs_err"] / allowed if allowed else 0.0, rule="as-accurate-as-cpu",
                     reason="")
    return {"output": _summary(accurate("output")),
            "loss": {**_summary(accurate("loss")), "value": float(t["loss"]), "reference": float(r["loss"])},
            **grads}


def cpu_finding(runs: dict, out_tol: Tolerance, grad_tol: Tolerance, normwise: bool = False) -> dict | None:
    """On an accelerator: where the CPU's own run misses float64 by the rules the target was
    held to (output, loss or a gradient), how far it and the target are: the report lists it
    apart ("where the CPU is the inaccurate side"), as a finding about the CPU, not a failure
    of the target. None where the CPU meets them: a margin of 1 or less (causes.cpu_misses_float64),
    as where NaN positions differ only where float64 has no number either. The margins count
    the elements both sides give as numbers; NaN or inf on the CPU where float64 has a number
    (accuracy.non_finite) makes the CPU's margin infinite. None too where the target misses
    any of the same rules (it passed by the CPU's yardstick, no further from float64 than the
    CPU): then neither side is the inaccurate one, and the note "the target does not" would
    be untrue."""
    from harness.parity.numerics import accuracy
    cpu = measure(runs["cpu"], runs["float64"], out_tol, grad_tol, normwise)
    missed = _missed(cpu)
    if not missed:
        return None
    target = measure(runs["target"], runs["float64"], out_tol, grad_tol, normwise)
    if set(_missed(target)) & set(missed):
        return None
    worst = max(cpu["grads"], key=lambda g: g["margin"], default={"margin": 0.0})
    side, ref = runs["cpu"], runs["float64"]
    nan = sum(accuracy.non_finite(side[what], ref[what]) for what in ("output", "loss")) + sum(
        accuracy.non_finite(grad, ref["grads"].get(name)) for name, grad in side["grads"].items())
    finding = {"missed": missed[:8], "cpu_err": cpu["output"]["max_abs_err"],
               "target_err": target["output"]["max_abs_err"],
               "cpu_margin": math.inf if nan else max(cpu["output"]["margin"], cpu["loss"]["margin"], worst["margin"]),
               **({"cpu_non_finite": nan} if nan else {})}
    return finding if causes.cpu_misses_float64(finding) else None


def _missed(measured: dict) -> list[str]:
    """What of a ``measure`` misses its rules: "output", "loss", then each gradient's name."""
    return [what for what in ("output", "loss") if not measured[what]["ok"]] + [
        g["name"] for g in measured["grads"] if not g["ok"]]


def _comparable(tokens, reference):
    """(rows, steps) mask: True where every token before this step agreed on both sides."""
    import torch
    agreed = (tokens == reference).long().cumprod(dim=1)
    return torch.cat([torch.ones_like(agreed[:, :1]), agreed[:, :-1]], dim=1).bool()


def _top2(scores) -> tuple[list, list]:
    """Per row and step: the best score and its lead over the second best."""
    top = scores.double().topk(2, dim=-1).values
    return top[..., 0].tolist(), (top[..., 0] - top[..., 1]).tolist()


def generation_record(got: dict, exp: dict, out_tol, normwise: bool = False) -> dict:
    """Plain data from two sides' greedy runs (``tokens``: rows x steps, ``scores``: rows x
    steps x vocab): both sides' tokens, the reference's top score and top-2 gap at every
    step, and the scores compared (``out_tol``, elementwise, or ``normwise`` in half
    precision) over the steps both sides reached from the same prefix (a row's step t
    counts while the tokens before it agree): the fields of a GenerationRun after its model,
    target, reference and new_tokens."""
    from harness.parity.numerics import accuracy
    comparable = _comparable(got["tokens"], exp["tokens"])
    top, gap = _top2(exp["scores"])
    scores = accuracy.compare(got["scores"][comparable], exp["scores"][comparable], as_tolerance(out_tol),
                              normwise=normwise)
    return {"tokens": got["tokens"].tolist(), "reference_tokens": exp["tokens"].tolist(), "reference_top": top,
            "reference_gap": gap, "comparable": comparable.tolist(), "scores": _summary(scores)}



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


def judge_generation(run: GenerationRun, tol: Tolerance) -> dict:
    """Same tokens, a tie, or a divergence.

    At the first step where the tokens part, the reference's lead of its top candidate over
    the runner-up (``gap``) decides: within ``tie_allowance`` the two sides may legitimately
    pick different tokens (a tie: it passes, with a note); a clear lead that the target did
    not follow is a divergence. Later steps continue from different prefixes and say
    nothing more. ``closest``: the smallest lead over the steps both sides reached from the
    same prefix, and ``near_ties`` how many of those steps were within the allowance (a
    near-tie the sides happened to resolve alike).
    """
    steps = [(run.reference_gap[r][t], tie_allowance(run.reference_top[r][t], tol))
             for r, row in enumerate(run.comparable) for t, ok in enumerate(row) if ok]
    out = {"verdict": "same", "row": None, "step": None, "gap": None, "allowed_gap": None,
           "closest": min((gap for gap, _ in steps), default=None),
           "near_ties": sum(gap <= allowed for gap, allowed in steps), "comparable_steps": len(steps)}
    where = first_divergence(run.tokens, run.reference_tokens)
    if where is None:
        return out
    row, step = where
    gap, allowed = run.reference_gap[row][step], tie_allowance(run.reference_top[row][step], tol)
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


# --------------------------------------------------------------------------- verdicts

def _tolerance_metrics(tol: Tolerance, prefix: str = "") -> dict:
    return {f"{prefix}rtol": tol.rtol, f"{prefix}atol": tol.atol, f"{prefix}tolerance_source": tol.source}


def _run_metrics(run) -> dict:
    """What every kind of run adds to its record where it applies: the precision computed
    in (a half dtype), NaN or inf counted where float64 has numbers (and then an infinite
    margin: no allowed error covers a NaN, and the finite elements' margin would hide it),
    and what the run was."""
    out = {}
    if getattr(run, "dtype", "float32") != "float32":
        out["dtype"] = run.dtype
    if getattr(run, "non_finite", 0):
        out.update(non_finite=run.non_finite, margin=math.inf)
        if getattr(run, "non_finite_on_cpu", None) is not None:   # what the first screen says is the CPU's too
            out["non_finite_on_cpu"] = run.non_finite_on_cpu
    out.update(getattr(run, "setting", None) or {})
    return out


def _non_finite(run) -> str:
    """The failure of a run that gave NaN or inf where its reference has numbers, however
    close the rest came: a NaN fails wherever it shows, even where nothing else is compared."""
    return f"{run.non_finite} value(s) NaN or inf where the {run.reference} reference has numbers"


def _failed(run, problems: str, tol: Tolerance, metrics: dict) -> Verdict:
    """A failure: what differs, then the diagnosed cause and its switch (an accelerator, or
    NaN or inf on any target: "non-finite"), else the tolerance it was judged with and
    where that is set (the CPU target: float32 against float64)."""
    found = run.diagnosis
    if found.get("cause"):
        metrics = {**metrics, "cause": found["cause"], "cause_what": found["cause_what"], "switch": found["switch"]}
        return Verdict(Status.FAIL, CATEGORY, with_cause(problems, found), metrics, cause=found["cause"])
    where = (f" (judged with rtol {tol.rtol:g}, atol {tol.atol:g}: the tolerance table, "
             "harness/parity/numerics/tolerances.py)")
    return Verdict(Status.FAIL, CATEGORY, problems + where, metrics)


def judge_forward_backward(run: StepRun, out_tol: Tolerance, grad_tol: Tolerance) -> Verdict:
    """Output, loss and every parameter's gradient (``runs.forward_backward``'s StepRun)
    within tolerance of the reference; a failure lists what is out, the gradients worst first."""
    diverged = diverged_gradients(run.grads)
    worst = max(run.grads, key=lambda g: g["margin"], default=None)
    metrics = {"max_abs_err": run.output["max_abs_err"], "max_rel_err": run.output["max_rel_err"],
               "margin": max(run.output["margin"], run.loss["margin"], worst["margin"] if worst else 0.0),
               "reference": f"cpu-{run.reference}" if run.reference == "float64" else run.reference,
               "output": run.output_name, "output_margin": run.output["margin"],
               "loss": run.loss["value"], "loss_reference": run.loss["reference"],
               "loss_abs_err": run.loss["max_abs_err"], "loss_margin": run.loss["margin"],
               **_tolerance_metrics(out_tol), **_run_metrics(run)}
    if worst is not None:   # a forward and backward pass; an inference run (no_grad) has no gradients to judge
        metrics.update(grad_worst=worst["name"], grad_worst_max_abs_err=worst["max_abs_err"],
                       grad_worst_rel_err=worst["rel_err"], grad_worst_scale=worst["scale"],
                       grad_margin=worst["margin"], grad_scale=run.scale, params_compared=len(run.grads),
                       params_without_grad=run.without_grad, grads_diverged=[g["name"] for g in diverged],
                       **_tolerance_metrics(grad_tol, "grad_"))
    if run.vs_float64 is not None:  # an accelerator: which float32 side is nearer float64, and the agreement
        vs = run.vs_float64
        errs = {side: vs[side]["output_max_abs_err"] for side in ("target", "cpu")}
        nearer = "equal" if errs["target"] == errs["cpu"] else min(errs, key=errs.get)
        metrics.update(vs_float64=vs, more_accurate=nearer, vs_cpu=run.vs_cpu, yardstick="cpu-float32")
    problems = [f"{what} out of tolerance: {side['reason']}"
                for what, side in (("output", run.output), ("loss", run.loss)) if not side["ok"]]
    if diverged:
        problems.append("gradients diverged (worst first): " + ", ".join(
            f"{g['name']} (margin {g['margin']:.3g}, "
            f"{g['reason'] if math.isinf(g['margin']) else 'relative error %.3g' % g['rel_err']})" for g in diverged))
    if not problems and run.non_finite:
        problems.append(_non_finite(run))
    if problems:
        return _failed(run, "; ".join(problems), grad_tol if diverged else out_tol, metrics)
    return Verdict(Status.PASS, CATEGORY, "; ".join(n for n in (_cpu_note(run.cpu_finding, metrics),
                                                               _sensitive_note(run)) if n), metrics)


def _sensitive_note(run: StepRun) -> str:
    """A passing run's note on the gradients that passed only within float64's own movement
    (runs.excuse_sensitive): what missed the table, by how much, and why that is no fault."""
    excused = [g for g in run.grads if g.get("rule") == "within-reference-sensitivity"]
    if not excused:
        return ""
    named = ", ".join(f"{g['name']} (relative error {g['rel_err']:.3g}, {g['tolerance_margin']:.3g}x the tolerance)"
                      for g in sorted(excused, key=lambda g: -g["tolerance_margin"])[:3])
    return (f"{len(excused)} gradient(s) beyond the tolerance table but within float64's own movement when every "
            f"weight moves by a few units of {run.dtype}'s rounding: {named}; a gate (a ReLU, a mask's edge) "
            f"that rounding flips moves them whole, so their error depends on the weights, not on this device")


def _cpu_note(finding: dict | None, metrics: dict) -> str:
    """A passing accelerator's note where the CPU, not the target, missed float64's rules
    (recorded as ``cpu_finding``, which the report lists apart)."""
    if not finding:
        return ""
    metrics["cpu_finding"] = finding
    return (f"the CPU is the inaccurate side: in the same precision it misses float64's rules "
            f"({', '.join(finding.get('missed', []))}; margin {finding['cpu_margin']:.3g}), the target does not")


def judge_training_run(run: TrainRun, tol: Tolerance) -> Verdict:
    """The target's loss curve (``runs.train``'s TrainRun) within ``curve_bound`` of
    float64's, or on an accelerator no further from it than the CPU's float32 curve."""
    curves = run.losses
    judged = judge_training(curves["target"], curves["float64"], tol, curves.get("cpu"))
    metrics = {"max_divergence": judged["max_divergence"], "margin": judged["margin"],
               "divergence": judged["divergence"], "bound": judged["bound"], "worst_step": judged["worst_step"],
               "losses": curves["target"], "reference_losses": curves["float64"], "lr": run.lr,
               "steps": run.steps, **_tolerance_metrics(tol), **_run_metrics(run)}
    if "cpu" in curves:  # an accelerator: both curves in the target's precision against float64
        metrics["vs_float64"] = {side: max(curve_divergence(curves[side], curves["float64"]))
                                 for side in ("target", "cpu")}
    if run.skipped is not None:
        metrics["skipped_steps"] = run.skipped
        metrics["loss_scales"] = run.scales
    if judged["ok"] and not run.non_finite:
        return Verdict(Status.PASS, CATEGORY, run.note, metrics)
    if judged["ok"]:
        return _failed(run, "; ".join(filter(None, (_non_finite(run), run.note))), tol, metrics)
    worst = judged["worst_step"]
    return _failed(run, f"loss curves diverged past the bound at steps {judged['over_steps']}: divergence "
                      f"{judged['max_divergence']:.3g} at step {worst} (bound {judged['bound'][worst]:.3g})"
                      + (f"; {run.note}" if run.note else ""), tol, metrics)


def judge_generation_run(run: GenerationRun, tol: Tolerance) -> Verdict:
    """Greedy generation (``runs.generate``'s GenerationRun) gives the reference's tokens, or
    parts from them only where the reference's top two candidates were tied within ``tol``;
    the scores before the tokens part are within ``tol``."""
    judged = judge_generation(run, tol)
    metrics = {"max_abs_err": run.scores["max_abs_err"], "max_rel_err": run.scores["max_rel_err"],
               "margin": run.scores["margin"], "verdict": judged["verdict"],
               "first_divergence_step": judged["step"], "first_divergence_row": judged["row"],
               "gap": judged["gap"], "allowed_gap": judged["allowed_gap"], "closest_gap": judged["closest"],
               "near_ties": judged["near_ties"], "comparable_steps": judged["comparable_steps"],
               "new_tokens": run.new_tokens, "reference": run.reference, **_tolerance_metrics(tol),
               **_run_metrics(run)}
    if judged["verdict"] == "tie":
        metrics["note"] = (f"tokens part at step {judged['step']} (row {judged['row']}), where the reference's "
                           f"top two were {judged['gap']:.3g} apart, within the {judged['allowed_gap']:.3g} "
                           "the tolerance allows: a tie, not a divergence")
    problem = None
    if run.non_finite:  # also where it came after the tokens parted, where no score is compared
        problem = _non_finite(run)
    elif not run.scores["ok"]:
        problem = f"scores out of tolerance before the tokens parted: {run.scores['reason']}"
    elif judged["verdict"] == "diverged":
        problem = (f"tokens diverged at step {judged['step']} (row {judged['row']}) although the reference's "
                   f"top candidate led by {judged['gap']:.3g}, more than the {judged['allowed_gap']:.3g} "
                   "the tolerance allows")
    if problem is None:
        note = ""
        if run.yardstick is not None:   # the target met float64's rules: did the CPU's own run?
            finding = _generation_finding(run, run.yardstick, tol)
            if causes.cpu_misses_float64(finding):
                metrics["cpu_finding"] = finding
                missed = ("its tokens part from float64's at step "
                          f"{finding['cpu_first_divergence_step']}" if finding["cpu_verdict"] == "diverged"
                          else f"its scores are off float64 (margin {finding['cpu_margin']:.3g})")
                note = (f"the CPU is the inaccurate side: its own run in {run.dtype} misses float64's rules "
                        f"({missed}), the target does not")
        return Verdict(Status.PASS, CATEGORY, note, metrics)
    if run.yardstick is not None and not run.non_finite and _as_accurate_as(run, judged, run.yardstick, tol):
        # both sides miss float64 here: the target no further than the CPU, which is the rule in half
        # precision; the CPU is not "the inaccurate side" (the report lists those apart), and its
        # figures are kept beside the target's
        metrics.update(rule="as-accurate-as-cpu", cpu_run=_generation_finding(run, run.yardstick, tol))
        return Verdict(Status.PASS, CATEGORY, f"as accurate as the CPU: {problem}, and the CPU's own run in "
                       f"{run.dtype} misses float64 as far", metrics)
    return _failed(run, problem, tol, metrics)


def _as_accurate_as(run: GenerationRun, judged: dict, cpu: GenerationRun, tol: Tolerance) -> bool:
    """The yardstick rule for greedy generation in half precision: the target's miss of
    float64 is no worse than the CPU's own run in the same dtype (its scores' margin within
    ACCURACY_FACTOR x the CPU's, and its tokens parting from float64's no earlier than the
    CPU's where the CPU's part too)."""
    theirs = judge_generation(cpu, tol)
    if cpu.scores["ok"] and theirs["verdict"] != "diverged":
        return False
    scores_ok = run.scores["ok"] or run.scores["margin"] <= tolerances.ACCURACY_FACTOR * cpu.scores["margin"]
    tokens_ok = (judged["verdict"] != "diverged"
                 or (theirs["verdict"] == "diverged" and judged["step"] >= theirs["step"]))
    return scores_ok and tokens_ok


def _generation_finding(run: GenerationRun, cpu: GenerationRun, tol: Tolerance) -> dict:
    theirs = judge_generation(cpu, tol)
    return {"cpu_err": cpu.scores["max_abs_err"], "target_err": run.scores["max_abs_err"],
            "cpu_margin": cpu.scores["margin"], "cpu_verdict": theirs["verdict"],
            "cpu_first_divergence_step": theirs["step"]}
