"""Each claim of harness/optim/claims.py as two runnable setups, and its measurement.

``PAIRS`` says, per claim name, how the knob is turned in the plain-PyTorch loop of
harness/optim/workloads.py: a function from the workload's starting setup to (baseline,
variant). Where a claim is one row of seed 003's cumulative path, the baseline is the
row before it, as the seed measured it. ``measure_claim`` (run in the sandbox child)
builds both, measures the claimed quantity with harness.optim.measure, and judges it against
the claims table's bound. Nothing here holds a number of a claim.

``claim_verdict`` turns a measured claim into the record's verdict. Where a peak is and
what holds it: harness/optim/peaks.py; seed 003's whole path: harness/optim/seedpath.py;
whether a technique keeps the result: harness/optim/same_result.py. The workload scales:
harness/optim/workloads.py ``SCALES``.
"""
from __future__ import annotations

from typing import Callable

from harness.core import devices
from harness.core.verdict import Verdict
from harness.optim import ratios
from harness.optim.peaks import allocator_view, anatomy_of, peak_story, single_tensor_alternative, weigh
from harness.optim.seedpath import seed_003_rows
from harness.optim.workloads import SCALES, TIME_BUDGET_S, TIME_ROUNDS, Setup


def _path_pair(name: str) -> Callable[[Setup], tuple[Setup, Setup]]:
    def pair(base: Setup) -> tuple[Setup, Setup]:
        rows = seed_003_rows(base)
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
# A claim without a pair is one this loop does not measure: claims.WHERE_MEASURED says why.


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
        out.update(claim_memory(measure, wa, wb, expect.basis, claim_expect, name))
    else:
        out.update(claim_time(measure, wa, wb, expect.basis, claim_expect, device, TIME_BUDGET_S[scale],
                              TIME_ROUNDS[scale]))
    return out


def claim_memory(measure, wa, wb, basis: str, claim_expect, name: str = "") -> dict:
    """Both sides' steady-step memory (tracked storages, or the optimizer state alone for that
    basis), judged against ``claim_expect``, with each peak's anatomy, the allocator's view,
    the peak's story, and the single-tensor AdamW alternative where the claim misses in the
    optimizer's step."""
    for w in (wa, wb):  # the optimizer state exists from the first step on: measure a steady step
        w.step()
    ma, mb = (weigh(measure, w) for w in (wa, wb))
    if basis == "optimizer-state":
        a, b = (measure.state_bytes(w.optimizer.state) for w in (wa, wb))
        out = ratios.compare_memory(a, b, claim_expect)
    else:
        out = ratios.compare_memory(ma["peak_bytes"], mb["peak_bytes"], claim_expect)
    out.update(peak_phase_a=ma["peak_phase"], peak_phase_b=mb["peak_phase"], anatomy_a=anatomy_of(ma),
               anatomy_b=anatomy_of(mb), **allocator_view(ma, mb, claim_expect, out["verdict"], basis))
    out["peak"] = peak_story(name, ma, mb)
    if out["verdict"] != "holds" and basis != "optimizer-state":
        alternative = single_tensor_alternative(measure, wa, wb, name, claim_expect, ma, mb)
        if alternative:
            out["alternative"] = alternative
            out["peak"] += " " + alternative["story"]
    return out


def claim_time(measure, wa, wb, basis: str, claim_expect, device: str, budget: float, rounds: int) -> dict:
    """Both sides timed in interleaved rounds (per sample, or optimizer.step() alone for that
    basis), the ratio and its interval moved onto the claim's per-sample bound."""
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
    res = ratios.compare_time(run_a, run_b, raw_expect, sync=devices.synchronizer(device), budget_s=budget, rounds=rounds)
    for key in ("time_ratio", "ci_low", "ci_high"):
        res[key] = res[key] * per
    res["claim"] = list(claim_expect)
    res.pop("durations_a"), res.pop("durations_b")
    return res


# A measured claim's verdict (harness.optim.ratios.judge) -> the record's category and status:
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
