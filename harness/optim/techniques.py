"""Each claim of harness/optim/claims.py as two runnable setups, and its measurement.

``PAIRS`` says, per claim name, how the knob is turned in the plain-PyTorch loop of
harness/optim/workloads.py: a function from the workload's starting setup to (baseline,
variant). Where a claim is one row of seed 003's cumulative path, the baseline is the
row before it, as the seed measured it. ``measure_claim`` (run in the sandbox child)
builds both, measures the claimed quantity with harness.optim.measure, and judges it against
the claims table's bound. Nothing here holds a number of a claim.

Workload scales: ``small`` (``bert-small``, batch 16, length 64, sized for a 2-core CPU),
``medium`` (``bert-base``, batch 32, length 128) and ``large`` (seed 003's shape: the
macbert-large model at batch 32, length 128). ``--workload auto`` (the default) picks one
per device: harness/core/sizing.py.
"""
from __future__ import annotations

from typing import Callable

from harness.core import devices
from harness.core.verdict import Verdict
from harness.optim.workloads import Setup

SCALES = {
    "small": Setup(model="bert-small", batch=16, seq=64),
    "medium": Setup(model="bert-base", batch=32, seq=128),
    "large": Setup(model="macbert-large", batch=32, seq=128),
}
TIME_BUDGET_S = {"small": 20.0, "medium": 60.0, "large": 120.0}   # extra rounds while a time verdict is undecided
TIME_ROUNDS = {"small": 6, "medium": 8, "large": 10}             # interleaved rounds before the first verdict


def _seed_003_rows(base: Setup) -> list[tuple[str, Setup]]:
    """Seed 003's path: each row adds one technique to the row before it."""
    ga = base.but(grad_accum=base.batch)
    ck = ga.but(checkpointing=True)
    ada = ck.but(optimizer="adafactor")
    frozen = ada.but(freeze_backbone=True)
    return [("baseline", base), ("gradient-accumulation", ga), ("gradient-checkpointing", ck),
            ("adafactor", ada), ("freeze-backbone", frozen), ("shorter-max-length", frozen.but(seq=base.seq // 2))]


def _path_pair(name: str) -> Callable[[Setup], tuple[Setup, Setup]]:
    def pair(base: Setup) -> tuple[Setup, Setup]:
        rows = _seed_003_rows(base)
        i = [r[0] for r in rows].index(name)
        return rows[i - 1][1], rows[i][1]
    return pair


PAIRS: dict[str, Callable[[Setup], tuple[Setup, Setup]]] = {
    "larger-batch": lambda b: (b.but(batch=b.batch // 2), b.but(batch=b.batch * 2)),
    "batch-multiple-of-8": lambda b: (b.but(batch=b.batch - 1), b),
    "gradient-accumulation": _path_pair("gradient-accumulation"),
    "gradient-checkpointing": _path_pair("gradient-checkpointing"),
    "adafactor": _path_pair("adafactor"),
    "freeze-backbone": _path_pair("freeze-backbone"),
    "shorter-max-length": _path_pair("shorter-max-length"),
    "fp16-autocast": lambda b: (b, b.but(autocast="float16")),
    "bf16-autocast": lambda b: (b, b.but(autocast="bfloat16")),
    "adamw-8bit": lambda b: (b, b.but(optimizer="adamw-8bit")),
    "fused-adamw": lambda b: (b, b.but(optimizer="adamw-fused")),
    "torch-compile": lambda b: (b, b.but(compile=True)),
    "peft-lora": lambda b: (b, b.but(lora=True)),
    "dynamic-padding": lambda b: (b, b.but(dynamic_padding=True)),
    "sdpa-attention": lambda b: (b.but(attn="eager"), b.but(attn="sdpa")),
    "tf32": lambda b: (b, b.but(tf32=True)),
    "torch-cuda-amp-on-mac": lambda b: (b, b.but(autocast="cuda-amp")),
    "accelerator-vs-cpu": lambda b: (b, b),  # the same setup; the baseline runs on the CPU (BASELINE_DEVICE)
}
# Claims whose baseline runs on another device than the target.
BASELINE_DEVICE = {"accelerator-vs-cpu": "cpu"}
# Claims whose knob this loop does not turn yet, and why.
NOT_MEASURED = {
    "dataloader-workers": "a DataLoader claim: measured through the Trainer (optim/dataloader-workers/time/trainer)",
    "pin-memory": "a DataLoader claim: measured through the Trainer (optim/pin-memory/time/trainer)",
    "deepspeed-zero": "applicability only (the claims table says so)",
}


def expectation(kind: str, bound: float) -> tuple[str, float]:
    """The claims table's bound (measured ratio limit) as a harness.optim.measure claim."""
    return ("lower", 1 / bound) if kind == "lower" else ("not higher", bound)


def measure_claim(name: str, quantity: str, device: str, scale: str = "small") -> dict:
    """Measure one claim's quantity on ``device``: the ratio variant / baseline, the verdict
    against the claims table, and for memory the anatomy of both sides."""
    from harness.optim import claims, measure
    from harness.optim.workloads import Workload
    claim = claims.by_name(name)
    expect = claim.expect(quantity)[device.split(":")[0]]
    baseline, variant = PAIRS[name](SCALES[scale])
    wa, wb = Workload(baseline, BASELINE_DEVICE.get(name, device)), Workload(variant, device)
    setup_values = {"trainable_fraction": wb.trainable_fraction()}
    bound = claims.holds_bound(claim, quantity, device.split(":")[0], **setup_values)
    claim_expect = expectation(expect.kind, bound)
    out = {"claim": name, "quantity": quantity, "basis": expect.basis, "baseline": repr(baseline),
           "variant": repr(variant), "claimed_ratio": claims.expected_ratio(claim, quantity, device.split(":")[0],
                                                                            **setup_values),
           "bound": bound, "kind": expect.kind, "source": expect.source, **setup_values}
    if quantity == "memory":
        out.update(_memory(measure, wa, wb, expect.basis, claim_expect, name))
    else:
        out.update(_time(measure, wa, wb, expect.basis, claim_expect, device, TIME_BUDGET_S[scale],
                         TIME_ROUNDS[scale]))
    return out


# What each memory claim's technique makes smaller (harness.optim.measure categories): the part of
# the peak it can lower. A peak made of something else is one the technique cannot move.
LOWERS = {
    "larger-batch": ("activations", "temporaries"),
    "batch-multiple-of-8": ("activations", "temporaries"),
    "gradient-accumulation": ("activations", "temporaries"),
    "gradient-checkpointing": ("activations",),
    "fp16-autocast": ("activations",),
    "bf16-autocast": ("activations",),
    "torch-cuda-amp-on-mac": ("activations",),
    "adafactor": ("optimizer_state",),
    "adamw-8bit": ("optimizer_state",),
    "fused-adamw": ("temporaries",),
    "freeze-backbone": ("gradients", "optimizer_state"),
    "peft-lora": ("gradients", "optimizer_state"),
    "shorter-max-length": ("activations", "temporaries"),
    "dynamic-padding": ("activations", "temporaries"),
    "sdpa-attention": ("activations", "temporaries"),
    "torch-compile": ("activations", "temporaries"),
}
# The optimizer the alternative measurement uses when a peak sits in AdamW's step.
SINGLE_TENSOR = "adamw-single"


def _memory(measure, wa, wb, basis: str, claim_expect, name: str = "") -> dict:
    for w in (wa, wb):  # the optimizer state exists from the first step on: measure a steady step
        w.step()
    ma, mb = (_weigh(measure, w) for w in (wa, wb))
    if basis == "optimizer-state":
        a, b = (measure.state_bytes(w.optimizer.state) for w in (wa, wb))
        out = measure.compare_memory(a, b, claim_expect)
    else:
        out = measure.compare_memory(ma["peak_bytes"], mb["peak_bytes"], claim_expect)
    out.update(peak_phase_a=ma["peak_phase"], peak_phase_b=mb["peak_phase"], anatomy_a=anatomy_of(ma),
               anatomy_b=anatomy_of(mb), **_allocator(measure, ma, mb, claim_expect, out["verdict"], basis))
    out["peak"] = peak_story(name, ma, mb)
    if out["verdict"] != "holds" and basis != "optimizer-state":
        alternative = _single_tensor_alternative(measure, wa, wb, name, claim_expect, ma, mb)
        if alternative:
            out["alternative"] = alternative
            out["peak"] += " " + alternative["story"]
    return out


def _weigh(measure, w) -> dict:
    """One labelled, tracked step of ``w`` (phases, categories), with the device allocator's
    own peak read over the same step where the device keeps one."""
    from harness.core import devices
    backend = devices.backend(w.device.split(":")[0])
    with measure.allocator_peak(backend, w.model) as allocator:
        m = measure.measure_memory(w.step, resident=w.resident(), labelled=True)
    return {**m, **allocator}


ANATOMY_KEYS = ("parameters", "buffers", "gradients", "optimizer_state", "batch", "activations", "temporaries")


def anatomy_of(m: dict) -> dict:
    """What the peak is made of: bytes per category live at the peak moment (seed 003's
    columns), the phase, and the peak itself."""
    return {**{k: m["at_peak"].get(k, 0) for k in ANATOMY_KEYS}, "peak_bytes": m["peak_bytes"],
            "peak_phase": m["peak_phase"]}


def _allocator(measure, ma: dict, mb: dict, claim_expect, verdict: str, basis: str) -> dict:
    """The device allocator's peaks beside the tracked bytes, and whether they would say
    otherwise about the claim (allocator bytes include block rounding and kernel workspaces)."""
    a, b = ma.get("allocator_peak"), mb.get("allocator_peak")
    out = {"allocator_method": ma.get("allocator_method") or mb.get("allocator_method"),
           "allocator_peak_a": a, "allocator_peak_b": b}
    if a is None or b is None:
        out["allocator_reason"] = ma.get("allocator_reason") or mb.get("allocator_reason") or ""
        return out
    if ma.get("allocator_driver_peak") is not None:
        out.update(allocator_driver_peak_a=ma["allocator_driver_peak"],
                   allocator_driver_peak_b=mb.get("allocator_driver_peak"))
    by_allocator = measure.compare_memory(a, b, claim_expect)
    out["allocator_ratio"] = by_allocator["mem_ratio"]
    if basis != "optimizer-state" and by_allocator["verdict"] != verdict:
        out["allocator_disagrees"] = (f"by the allocator's peak ({out['allocator_method']}) the claim "
                                      f"{by_allocator['verdict']}: ratio {by_allocator['mem_ratio']:.3f} against "
                                      f"{verdict} by the tracked storages")
    return out


def _share(m: dict, categories) -> float:
    return sum(m["at_peak"].get(c, 0) for c in categories) / m["peak_bytes"] if m["peak_bytes"] else 0.0


def _makeup(m: dict, top: int = 3) -> str:
    parts = sorted(((v, k) for k, v in m["at_peak"].items() if v), reverse=True)[:top]
    return ", ".join(f"{k.replace('_', ' ')} {v / m['peak_bytes']:.0%}" for v, k in parts)


def peak_story(name: str, ma: dict, mb: dict) -> str:
    """Where each side's peak is and what holds it, and how much of it the technique can
    lower, in a user's terms."""
    mib = 2 ** 20
    text = (f"baseline peak {ma['peak_bytes'] / mib:.1f} MiB in the {ma['peak_phase']} phase ({_makeup(ma)}); "
            f"with the technique {mb['peak_bytes'] / mib:.1f} MiB in the {mb['peak_phase']} phase ({_makeup(mb)})")
    lowers = LOWERS.get(name)
    if lowers:
        what = " and ".join(c.replace("_", " ") for c in lowers)
        text += f"; {name} lowers {what}: {_share(ma, lowers):.0%} of the baseline's peak"
    return text + "."


def _single_tensor_alternative(measure, wa, wb, name: str, claim_expect, ma: dict, mb: dict) -> dict | None:
    """A memory claim that does not hold with the peak in AdamW's step: measure both sides
    again with AdamW one parameter at a time (``foreach=False``; CUDA's default is foreach,
    whose temporaries span every parameter at once) and say where the peak goes."""
    from harness.optim.workloads import Workload
    if "optimizer" not in (ma["peak_phase"], mb["peak_phase"]):
        return None
    if not (wa.setup.optimizer == wb.setup.optimizer and wa.setup.optimizer in ("adamw", "adamw-foreach")):
        return None
    alt = [Workload(w.setup.but(optimizer=SINGLE_TENSOR), w.device) for w in (wa, wb)]
    for w in alt:
        w.step()
    aa, ab = (_weigh(measure, w) for w in alt)
    res = measure.compare_memory(aa["peak_bytes"], ab["peak_bytes"], claim_expect)
    return {"optimizer": SINGLE_TENSOR, "mem_ratio": res["mem_ratio"], "verdict": res["verdict"],
            "peak_phase_a": aa["peak_phase"], "peak_phase_b": ab["peak_phase"],
            "anatomy_a": anatomy_of(aa), "anatomy_b": anatomy_of(ab),
            "story": alternative_story(name, wa.setup.optimizer, aa, res)}


def alternative_story(name: str, optimizer: str, alt_baseline: dict, res: dict) -> str:
    """What the single-tensor AdamW measurement says about a claim whose peak sat in the
    optimizer's step: where the peak goes, and what the technique does to it there."""
    head = f"The peak is in AdamW's step ({optimizer}), which {name} does not shrink; with AdamW(foreach=False) "
    change = 1 - res["mem_ratio"]
    effect = (f"{name} lowers it by {change:.0%}" if change > 0 else
              f"{name} raises it by {-change:.0%}" if change < 0 else f"{name} leaves it unchanged")
    tail = f" (ratio {res['mem_ratio']:.3f}: the claim {res['verdict']} there)."
    if alt_baseline["peak_phase"] == "optimizer":
        floor = _share(alt_baseline, ("parameters", "buffers", "gradients", "optimizer_state"))
        return (head + f"the peak stays in the optimizer step, {floor:.0%} of it the weights, gradients and "
                f"optimizer state themselves, and {effect}" + tail)
    return head + f"the baseline's peak moves to the {alt_baseline['peak_phase']} phase and {effect}" + tail


def _time(measure, wa, wb, basis: str, claim_expect, device: str, budget: float, rounds: int) -> dict:
    if basis == "optimizer-step":
        for w in (wa, wb):
            w.step_without_update()
        run_a, run_b = wa.optimizer.step, wb.optimizer.step
        per = 1.0
    else:  # per sample: one step of each processes setup.batch samples
        run_a, run_b = wa.step, wb.step
        per = wa.setup.batch / wb.setup.batch
    op, limit = claim_expect
    # compare_time judges raw step durations: move the per-sample bound onto them
    raw_expect = (op, limit * per) if op == "lower" else (op, limit / per)
    res = measure.compare_time(run_a, run_b, raw_expect, sync=devices.synchronizer(device), budget_s=budget, rounds=rounds)
    for key in ("time_ratio", "ci_low", "ci_high"):
        res[key] = res[key] * per
    res["claim"] = list(claim_expect)
    res.pop("durations_a"), res.pop("durations_b")
    return res


def seed_003_path(device: str, scale: str = "small") -> list[dict]:
    """Seed 003's cumulative path on ``device``: each row's peak memory (tracked storage
    bytes, steady state, with its phase) and its step time against the baseline's, timed as
    the claims are: interleaved rounds (harness.optim.measure.compare_time) of the row and the
    baseline, the ratio of medians with its bootstrap interval. Only the baseline and one
    row are built at a time. The seed's own ratio for the row is the expectation that
    decides whether more rounds are spent; ``vs_seed`` is that verdict."""
    from harness.optim import claims, measure
    from harness.optim.workloads import Workload
    steps = claims.SEED_003_PATH.steps
    seed = {s.claim: s.time_s / steps[0].time_s for s in steps[1:]}  # the seed's row over its baseline
    sync = devices.synchronizer(device)
    rows, base_durations = [], []
    setups = _seed_003_rows(SCALES[scale])
    base = Workload(setups[0][1], device)
    base.step()
    for name, setup in setups:
        w = base if name == "baseline" else Workload(setup, device)
        if w is not base:
            w.step()
        mem = measure.measure_memory(w.step, resident=w.resident(), labelled=True)
        row = {"row": name, "setup": repr(setup), "peak_bytes": mem["peak_bytes"], "peak_phase": mem["peak_phase"],
               "batch": setup.batch, "grad_accum": setup.grad_accum, "seq": setup.seq}
        if w is not base:
            t = measure.compare_time(base.step, w.step, ("not higher", seed[name]), sync=sync, warmup=1, rounds=TIME_ROUNDS[scale],
                                     budget_s=TIME_BUDGET_S[scale] / 2)
            base_durations += t["durations_a"]
            row.update(step_s=t["median_b_s"], time_ratio=t["time_ratio"], ci_low=t["ci_low"], ci_high=t["ci_high"],
                       rounds=t["rounds"], vs_seed=t["verdict"])
            del w
        rows.append(row)
    import statistics
    rows[0].update(step_s=statistics.median(base_durations), time_ratio=1.0, ci_low=1.0, ci_high=1.0,
                   rounds=len(base_durations), vs_seed="")
    return rows


def path_table(rows: list[dict], seed_path) -> str:
    """Measured rows beside the seed's, in the seed's form: memory and time, and each row's
    ratio to the baseline with its interval (the seed's GB and seconds are another model on
    another device; the ratios are what compare)."""
    from tabulate import tabulate
    seed_rows = seed_path.steps
    base, seed_base = rows[0], seed_rows[0]
    body = []
    for mine, theirs in zip(rows, seed_rows):
        body.append([theirs.row, f"{mine['peak_bytes'] / 2**20:.1f}", f"{mine['peak_bytes'] / base['peak_bytes']:.2f}",
                     f"{theirs.memory_gb / seed_base.memory_gb:.2f}", f"{mine['step_s']:.3f}", time_cell(mine, base),
                     f"{theirs.time_s / seed_base.time_s:.2f}"])
    return tabulate(body, headers=("row (seed 003)", "peak MiB", "x baseline", "seed x baseline", "step s",
                                   "x baseline [95%]", "seed x baseline"), tablefmt="simple")


def time_cell(row: dict, base: dict) -> str:
    """A path row's time ratio to the baseline, with its interval where it was timed in
    interleaved rounds (rows recorded before that carry medians only: their plain ratio)."""
    ratio = row.get("time_ratio", row["step_s"] / base["step_s"])
    if row.get("ci_low") is None or row is base:
        return f"{ratio:.2f}"
    return f"{ratio:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


# --------------------------------------------------------------------------- same result?

def _grads(workload) -> dict:
    workload.optimizer.zero_grad(set_to_none=True)
    workload.step_without_update()
    return {n: p.grad.detach().cpu().clone() for n, p in workload.model.named_parameters() if p.grad is not None}


def _params(workload) -> dict:
    return {n: p.detach().cpu().clone() for n, p in workload.model.named_parameters()}


def keeps_the_result(name: str, device: str) -> dict:
    """Does the optimization change what training computes? (dropout off on both sides)

      gradient-accumulation   the accumulated gradients equal the big batch's
      gradient-checkpointing  the gradients equal those without checkpointing
      torch-compile           the compiled model's gradients equal eager's
      freeze-backbone / peft-lora   one step changes exactly the parameters it should
    Returns the gradients (or parameter changes) as plain lists for the caller to compare.
    """
    from harness.optim.workloads import Workload
    base = Setup(model="tiny", batch=4, seq=16, dropout=False)
    if name in ("gradient-accumulation", "gradient-checkpointing", "torch-compile"):
        variant = {"gradient-accumulation": base.but(grad_accum=4), "gradient-checkpointing": base.but(checkpointing=True),
                   "torch-compile": base.but(compile=True)}[name]
        wa, wb = Workload(base, device), Workload(variant, device)
        if name == "gradient-accumulation":  # the same samples: the big batch is the micro-batches stacked
            import torch
            wa.batches = [{k: torch.cat([b[k] for b in wb.batches]) for k in wb.batches[0]}]
        ga, gb = _grads(wa), _grads(wb)
        return {"kind": "gradients", "names": sorted(ga), "a": [ga[n].tolist() for n in sorted(ga)],
                "b": [gb[n].tolist() if n in gb else None for n in sorted(ga)]}
    variant = {"freeze-backbone": base.but(freeze_backbone=True), "peft-lora": base.but(lora=True)}[name]
    w = Workload(variant, device)
    before = _params(w)
    w.step()
    after = _params(w)
    trainable = sorted(n for n, p in w.model.named_parameters() if p.requires_grad)
    changed = sorted(n for n in before if not bool((before[n] == after[n]).all()))
    return {"kind": "trained", "trainable": trainable, "changed": changed, "all": sorted(before)}


def same_result_verdict(r: dict) -> Verdict:
    """Judge what ``keeps_the_result`` returned: pass, or fail with what diverged.

    Gradients are compared normwise per parameter against the whole-model gradient tolerance
    (harness.parity.tolerances, "model-grad" float32); a parameter without a gradient on the variant
    side is a divergence. Trained parameters must be exactly the trainable ones, and neither
    none nor all of the model's.
    """
    if r["kind"] == "gradients":
        import torch
        from harness.parity import accuracy
        from harness.parity.tolerances import TABLE
        tol = TABLE[("model-grad", "float32")]
        worst, diverged = None, []
        for name, a, b in zip(r["names"], r["a"], r["b"]):
            if b is None:
                diverged.append(f"{name}: no gradient")
                continue
            res = accuracy.compare(torch.tensor(b), torch.tensor(a), tol, normwise=True)
            worst = res if worst is None or res["margin"] > worst["margin"] else worst
            if not res["ok"]:
                diverged.append(f"{name} (margin {res['margin']:.3g})")
        metrics = {"margin": worst["margin"] if worst else None, "max_abs_err": worst["max_abs_err"] if worst else None,
                   "params_compared": len(r["names"]), "rtol": tol.rtol, "atol": tol.atol,
                   "tolerance_source": tol.source}
        ok = bool(r["names"]) and not diverged
        message = "" if ok else ("no gradients to compare" if not r["names"] else
                                 "gradients differ: " + ", ".join(diverged))
        return Verdict("pass" if ok else "fail", None, message, metrics)
    trainable, changed, everything = set(r["trainable"]), set(r["changed"]), r["all"]
    metrics = {"trainable": len(trainable), "changed": len(changed), "params": len(everything)}
    if changed != trainable:
        return Verdict("fail", None, f"trained {len(changed)} parameters, {len(trainable)} are trainable: "
                       f"unexpected {sorted(changed - trainable)[:5]}, untouched {sorted(trainable - changed)[:5]}",
                       metrics)
    if not 0 < len(trainable) < len(everything):
        return Verdict("fail", None, f"{len(trainable)} of {len(everything)} parameters trainable: the technique "
                       "froze nothing or everything", metrics)
    return Verdict("pass", None, "", metrics)


# A measured claim's verdict (harness.optim.measure.judge) -> the record's category and status:
# the document's promise failing is an expected failure, not a failure of the machine.
CLAIM_STATUS = {"holds": "pass", "does not hold": "xfail", "inconclusive": "xfail"}
# What a measurement returns that the record keeps beside the ratio and its interval.
MEASURED = ("bytes_a", "bytes_b", "median_a_s", "median_b_s", "trainable_fraction", "peak_phase_a", "peak_phase_b",
            "anatomy_a", "anatomy_b", "peak", "alternative", "allocator_method", "allocator_peak_a",
            "allocator_peak_b", "allocator_ratio", "allocator_disagrees", "allocator_reason",
            "allocator_driver_peak_a", "allocator_driver_peak_b")


def claim_verdict(r: dict, quantity: str, expect, source: str, metrics: dict | None = None) -> Verdict:
    """A measured claim (``measure_claim`` / trainer_runs) as a verdict: category holds,
    does-not-hold or inconclusive; the ratio, its interval and the bound in the message
    and the metrics (with ``metrics``, the workload's, added)."""
    ratio_key = "mem_ratio" if quantity == "memory" else "time_ratio"
    kept = {ratio_key: r[ratio_key], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "rounds": r["rounds"],
            "claimed_ratio": r["claimed_ratio"], "bound": r["bound"], "baseline": r["baseline"],
            "variant": r["variant"], **(metrics or {}), **{k: r[k] for k in MEASURED if k in r}}
    summary = (f"{ratio_key} {r[ratio_key]:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] against "
               f"{'< ' if expect.kind == 'lower' else '<= '}{r['bound']:.3f} (claimed {r['claimed_ratio']:.3g}, "
               f"{expect.source or source})")
    if r.get("peak"):  # where the peak is, what holds it, and what the technique can lower of it
        summary += f". {r['peak']}"
    if r.get("allocator_disagrees"):
        summary += f" Note: {r['allocator_disagrees']}."
    lead = {"holds": "", "does not hold": "the claim does not hold here: ",
            "inconclusive": "inconclusive within the time budget: "}[r["verdict"]]
    return Verdict(CLAIM_STATUS[r["verdict"]], r["verdict"].replace(" ", "-"),
                   "" if r["verdict"] == "holds" else lead + summary, kept)
