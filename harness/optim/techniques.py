"""Each claim of harness/optim/claims.py as two runnable setups, measured and judged.

``PAIRS`` says, per claim name, how the knob is turned in the plain-PyTorch loop of
harness/optim/workloads.py: a function from the workload's starting setup to (baseline,
variant). Where a claim is one row of seed 003's cumulative path, the baseline is the
row before it, as the seed measured it. ``measure_claim`` (run in the sandbox child)
builds both, measures the claimed quantity (memory with harness.optim.measure, time with
harness.optim.ratios) and judges it against the claims table's bound: a ``ClaimRun``, which
harness/optim/trainer_runs.py makes too, through the Trainer. ``claim_verdict`` turns a
ClaimRun into the record's verdict. Nothing here holds a number of a claim.

What the claims of one workload share is measured once in a sandbox child: the sides are
built once and kept (harness.optim.workloads.built), each side's steady step is weighed once
(harness.optim.measure.weighed), and the time claims of seed 003's path are timed as one
family (harness.optim.seedpath.path_family_time: every row once per round, each claim's
ratio read from those rounds). Each cache is keyed by the setup, the target and the torch
settings (harness.optim.workloads.key_of).

Where a memory peak is, what holds it and what a technique can lower of it: one labelled,
tracked step (``weigh``: harness.optim.measure's categories and phases, with the device
allocator's own peak beside it), the anatomy of a peak (seed 003's columns), the story a
record tells about it, and the second measurement with AdamW one parameter at a time when a
claim's peak sits in the optimizer's step (``single_tensor_alternative``).

Seed 003's whole path: harness/optim/seedpath.py; whether a technique keeps the result:
harness/optim/same_result.py. The workload scales: harness/optim/workloads.py ``SCALES``.
torch (through harness.optim.measure) is imported where it is used: the suite collects
without it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from harness.core.records import Category, ClaimKind, Status, Verdict, recorded_number
from harness.env import devices
from harness.optim import claims, ratios
from harness.optim.ratios import Bound
from harness.optim.seedpath import FAMILY, path_family_time, seed_003_rows
from harness.optim.workloads import (SCALES, TIME_BUDGET_S, TIME_ROUNDS, Setup, built, compile_beyond_emulation,
                                     keep_only, require_compiled)


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
    # the claims table's baseline, torch.optim.AdamW (foreach), run as it says on every device: AdamW's
    # default is foreach on CUDA only (the per-parameter loop on the CPU and MPS: torch/optim/optimizer.py
    # _default_to_fused_or_foreach)
    "fused-adamw": lambda b: (b.but(optimizer="adamw-foreach"), b.but(optimizer="adamw-fused")),
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


def rules_of(device: str) -> str:
    """The claims table's target class for ``device`` ("cuda:0" -> "cuda"): the device whose
    rules apply (harness.env.devices.rules_of: "mps" for the emulated Mac)."""
    return devices.rules_of(device.split(":")[0]).split(":")[0]


# --------------------------------------------------------------------------- a claim measured

@dataclasses.dataclass
class ClaimRun:
    """A claim's quantity measured on a target (``measure_claim``, or through the Trainer
    harness.optim.trainer_runs.measure_trainer_claim), for ``claim_verdict``."""
    claim: str
    quantity: str                  # memory or time
    kind: str                      # the claim's ClaimKind on this target
    bound: float                   # the largest ratio that still holds (claims.holds_bound)
    claimed_ratio: float | None
    source: str
    baseline: str                  # the two sides, in words
    variant: str
    ratio: float                   # variant / baseline: peak memory, or time per sample
    ci_low: float                  # the ratio's 95% interval (a point for memory: bytes are exact)
    ci_high: float
    rounds: int
    category: str                  # holds, does-not-hold or inconclusive (harness.optim.ratios.judge)
    measured: dict = dataclasses.field(default_factory=dict)   # what the record keeps beside (MEASURED)
    basis: str = ""

    @property
    def ratio_key(self) -> str:
        return "mem_ratio" if self.quantity == "memory" else "time_ratio"


# What a measurement finds that the record keeps beside the ratio and its interval.
MEASURED = ("bytes_a", "bytes_b", "median_a_s", "median_b_s", "trainable_fraction", "peak_phase_a", "peak_phase_b",
            "anatomy_a", "anatomy_b", "peak", "alternative", "allocator_method", "allocator_peak_a",
            "allocator_peak_b", "allocator_ratio", "allocator_disagrees", "allocator_reason",
            "allocator_driver_peak_a", "allocator_driver_peak_b", "allocator_held_a", "allocator_held_b",
            "allocator_own_peak_a", "allocator_own_peak_b", "allocator_beyond_a", "allocator_beyond_b",
            "micro_batches_weighed_a", "micro_batches_weighed_b",   # "2 of 32": measure.weigh_micro_batches; the
            # Trainer's "3 of 32 in each step": trainer_runs.tracked_micro_batches
            "family",   # a timing family's rounds and seconds, per pair (family_account)
            "stopped", "zone",   # why the rounds stopped (harness.optim.ratios: decided, zone, budget, max-rounds)
            "durations_a", "durations_b",   # each round's seconds (rounded: durations), for replaying a run's rounds
            "warmup_a_s", "warmup_b_s",     # each warm-up call's seconds: the first holds a compile or a cold start
            "load",   # the machine's load during a time measurement (timing.load_during): compare weighs it
            "loss_a", "loss_b",   # each side's loss in a measured step: NaN or inf with the technique breaks training
            "loading")   # a loading claim's loader, timed alone in the main process (trainer_runs.loading_bottleneck)


def claim_run(found: dict, **fields) -> ClaimRun:
    """A ClaimRun from a measurement's findings (``ratios.compare_memory`` / ``compare_time``
    with the anatomy and the allocator's view) and the claim's own ``fields``."""
    ratio_key = "mem_ratio" if fields["quantity"] == "memory" else "time_ratio"
    return ClaimRun(**fields, ratio=found[ratio_key], ci_low=found["ci_low"], ci_high=found["ci_high"],
                    rounds=found["rounds"], category=found["category"],
                    measured={k: found[k] for k in MEASURED if k in found})


def measure_claim(name: str, quantity: str, device: str, scale: str = "small",
                  family: tuple[str, ...] = ()) -> ClaimRun:
    """Measure one claim's quantity on ``device``: the ratio variant / baseline, the verdict
    against the claims table, and for memory the anatomy of both sides.

    ``family``: the checks of seed 003's path that this run times on ``device``
    (harness.optim.seedpath.FAMILY names them; the suite passes the selected ones). A time
    claim among them is read from the family's rounds, timed once for all of them."""
    claim = claims.by_name(name)
    target_class = rules_of(device)
    expect = claim.expect(quantity)[target_class]
    baseline, variant = PAIRS[name](SCALES[scale])
    if devices.is_emulated(device) and (baseline.compile or variant.compile):   # skipped, with why, unbuilt
        raise devices.BeyondEmulation(compile_beyond_emulation(device))
    wa, wb = built(baseline, BASELINE_DEVICE.get(name, device)), built(variant, device)
    # a time claim's compiled side must call compiled graphs in its own rounds; a memory claim's, in its
    # weighed step (kept from an earlier claim: measure.weighed), at any time
    calls = {id(w): w.graph_calls if quantity == "time" and w.setup.compile else 0 for w in (wa, wb)}
    setup_values = {"trainable_fraction": wb.trainable_fraction()}
    bound = Bound(expect.kind, claims.holds_bound(claim, quantity, target_class, **setup_values))
    if quantity == "memory":
        found = claim_memory(wa, wb, expect.basis, bound, name)
    elif name in family and name in FAMILY and expect.basis == "per-sample":
        timed = path_family_time(device, scale, family)
        found = durations(dict(timed["pairs"][name]))
        found["family"] = family_account(timed)
    else:
        found = claim_time(wa, wb, expect.basis, bound, device, TIME_BUDGET_S[scale], TIME_ROUNDS[scale])
    for w in (wa, wb):   # a "compiled" side that ran eager is not judged: eager against eager says nothing
        require_compiled(w, calls[id(w)])
    found.update(setup_values)
    return claim_run(found, claim=name, quantity=quantity, kind=expect.kind, bound=bound.limit,
                     claimed_ratio=claims.expected_ratio(claim, quantity, target_class, **setup_values),
                     source=expect.source, baseline=repr(baseline), variant=repr(variant), basis=expect.basis)


def family_account(timed: dict) -> dict:
    """Where a timing family's seconds went, kept in each member's record: the first member's
    duration carries the whole family, and a run stopped before the later members would
    otherwise not say which pair bought rounds (an H100 family took 239 s where its rounds
    alone come to about 100)."""
    return {"rounds": timed["rounds"], "seconds": timed["seconds"], "build_s": timed.get("build_s"),
            "together": timed.get("together"),
            "warmup_s": {side: [round(x, 4) for x in s] for side, s in (timed.get("warmup_s") or {}).items()},
            "pairs": {name: {"rounds": p["rounds"], "seconds": p["seconds"], "category": p["category"],
                             "stopped": p.get("stopped")}
                      for name, p in timed["pairs"].items()}}


def claim_memory(wa, wb, basis: str, bound: Bound, name: str = "") -> dict:
    """Both sides' steady-step memory (tracked storages, or the optimizer state alone for that
    basis), judged against ``bound``, with each peak's anatomy, the allocator's view, the
    peak's story, and the single-tensor AdamW alternative where the claim misses in the
    optimizer's step."""
    from harness.optim import measure
    keep_only(wa, wb)   # the allocator's figures count what is alive: the two sides, as a claim alone has
    ma, mb = (measure.weighed(w) for w in (wa, wb))
    if basis == "optimizer-state":
        for w in (wa, wb):
            if not w.optimizer.state:   # a workload built again after its step was weighed: one step makes it
                w.step()
        a, b = (measure.state_bytes(w.optimizer.state) for w in (wa, wb))
        out = ratios.compare_memory(a, b, bound)
    else:
        out = ratios.compare_memory(ma["peak_bytes"], mb["peak_bytes"], bound)
    out.update(peak_phase_a=ma["peak_phase"], peak_phase_b=mb["peak_phase"], anatomy_a=anatomy_of(ma),
               anatomy_b=anatomy_of(mb), **allocator_view(ma, mb, bound, out["category"], basis))
    for side, m in (("a", ma), ("b", mb)):
        if m.get("micro_batches_weighed"):
            out[f"micro_batches_weighed_{side}"] = m["micro_batches_weighed"]
    out.update(loss_a=ma.get("loss"), loss_b=mb.get("loss"))
    out["peak"] = peak_story(name, ma, mb)
    if out["category"] != Category.HOLDS and basis != "optimizer-state":
        alternative = single_tensor_alternative(wa, wb, name, bound, ma, mb)
        if alternative:
            out["alternative"] = alternative
            out["peak"] += " " + alternative["story"]
    return out


def claim_time(wa, wb, basis: str, bound: Bound, device: str, budget: float, rounds: int) -> dict:
    """Both sides timed in interleaved rounds (per sample, or optimizer.step() alone for that
    basis), the ratio and its interval moved onto the claim's per-sample bound."""
    if basis == "optimizer-step":
        for w in (wa, wb):
            w.step_without_update()
        run_a, run_b = wa.optimizer_step, wb.optimizer_step
        per = 1.0
    else:  # per sample: one step of each processes setup.batch samples, its loss kept (the last round's)
        losses = {}

        def run_a():
            losses["a"] = wa.step()

        def run_b():
            losses["b"] = wb.step()
        per = wa.setup.batch / wb.setup.batch
    # compare_time judges raw step durations: the per-sample bound, moved onto them
    try:
        res = ratios.compare_time(run_a, run_b, bound.scaled(per), sync=devices.synchronizer(device),
                                  budget_s=budget, rounds=rounds)
    finally:
        if basis == "optimizer-step":   # kept workloads step again later: not onto these gradients
            for w in (wa, wb):
                w.optimizer.zero_grad(set_to_none=True)
    for key in ("time_ratio", "ci_low", "ci_high"):
        res[key] = res[key] * per
    if basis != "optimizer-step":
        res.update(loss_a=losses.get("a"), loss_b=losses.get("b"))
    return durations(res)


def durations(found: dict) -> dict:
    """``found`` with its seconds per round and per warm-up call rounded to a tenth of a
    microsecond (below any clock's use here): a record keeps them, at a dozen characters a round."""
    for key in ("durations_a", "durations_b", "warmup_a_s", "warmup_b_s"):
        if key in found:
            found[key] = [round(x, 7) for x in found[key]]
    return found


# A measured claim's verdict (its category) -> the record's status: the document's promise
# failing is an expected failure, not a failure of the machine.
CLAIM_STATUS = {Category.HOLDS: Status.PASS, Category.DOES_NOT_HOLD: Status.XFAIL,
                Category.INCONCLUSIVE: Status.XFAIL}
LEAD = {Category.HOLDS: "", Category.DOES_NOT_HOLD: "the claim does not hold here: ",
        Category.INCONCLUSIVE: "inconclusive within the time budget: "}
# An inconclusive time verdict's lead, by why its rounds stopped (harness.optim.ratios.IN_ZONE, MAX_ROUNDS).
LEAD_STOPPED = {ratios.IN_ZONE: "inconclusive, too close to the bound to call (its interval lies inside the "
                                "{zone:.0%} zone around it, where more rounds would not decide it): ",
                ratios.MAX_ROUNDS: "inconclusive after the most rounds: "}
# A claim made for a loader that is the bottleneck (claims.py: dataloader-workers), measured where
# loading is a small share of a step: not judged (harness.optim.trainer_runs.loading_bottleneck).
NOT_THE_BOTTLENECK = "loading-not-the-bottleneck"
# Below this share of a train() call spent loading its batches in the main process, worker
# processes have next to nothing to hide: what they change is their own start-up and contention.
LOADING_BOTTLENECK = 0.10


def loading_story(loading: dict) -> str:
    """What a judged loading claim's record says of its loader: the share of a call spent
    loading in the main process, and the workers' start-up where it was measured."""
    if not loading.get("share"):
        return ""
    out = (f"Loading a train() call's batches in the main process takes {loading['load_s'] * 1e3:.0f} ms of the "
           f"call's {loading['call_s'] * 1e3:.0f} ms ({loading['share']:.0%}) here")
    if loading.get("startup_s") is not None:
        how = f" (started by '{loading['start_method']}')" if loading.get("start_method") else ""
        if loading["startup_s"] > 0:
            out += (f"; the workers take about {loading['startup_s']:.2f} s to start{how}, once per train() with "
                    "dataloader_persistent_workers=True (as measured), once per epoch without")
        else:   # one first call against a median: below this machine's noise, not a negative start-up
            out += (f"; the workers' start-up{how} was too short to tell from the calls' own spread here (the "
                    "variant's first call took no longer than the baseline's)")
    return out


def not_the_bottleneck_lead(loading: dict) -> str:
    """The lead of a loading claim not judged because loading is no bottleneck here (``loading``:
    the record's ``loading``: seconds to load a call's batches, the call's seconds, the share)."""
    return (f"not judged: the document's advice is for a loader that is the bottleneck, and here loading a "
            f"train() call's batches in the main process takes {loading['load_s'] * 1e3:.1f} ms of the call's "
            f"{loading['call_s'] * 1e3:.0f} ms ({loading['share']:.1%}, under the {LOADING_BOTTLENECK:.0%} where "
            "workers have anything to hide), so the ratio measures the workers' start-up and contention, not "
            "preloading. Time your own loader (tokenizing on the fly, reading files, augmenting) with and without "
            "workers (dataloader_num_workers) before you set them: ")


# What a verdict says, in a sentence.
SAYS = {Category.HOLDS: "the claim holds", Category.DOES_NOT_HOLD: "the claim does not hold",
        Category.INCONCLUSIVE: "the claim is inconclusive"}


def breaks_training(measured: dict) -> str | None:
    """Why the technique breaks training on this device, in words, or None: its step's loss is
    NaN or inf where the step without it has a finite one (a memory or time saving that
    cannot train is no help: half precision on MPS is where users meet it). A loss that is
    not finite on both sides is the workload's on this device, not the technique's
    (``loss_note``); a measurement without losses (an older record, the optimizer-step
    basis) says nothing."""
    a, b = (recorded_number(measured.get(key)) for key in ("loss_a", "loss_b"))
    if a is None or b is None or not math.isfinite(a) or math.isfinite(b):
        return None
    return (f"with it the training step's loss is {b} on this device, where without it it is {a:.4g}: it breaks "
            f"training here, whatever it saves")


def loss_note(measured: dict) -> str | None:
    """A note where neither side's loss is finite: the workload does not train on this device
    at all, with or without the technique (the model parity checks say why)."""
    a, b = (recorded_number(measured.get(key)) for key in ("loss_a", "loss_b"))
    if a is None or b is None or math.isfinite(a) or math.isfinite(b):
        return None
    return (f"the training step's loss is {a} without the technique and {b} with it: this workload does not train "
            f"on this device at all (the model parity checks say why), so the ratio is of steps that learn nothing")


def claim_verdict(run: ClaimRun, source: str, metrics: dict | None = None) -> Verdict:
    """A measured claim as a verdict: category holds, does-not-hold or inconclusive; the
    ratio, its interval and the bound in the message and the metrics (with ``metrics``, the
    workload's, added); ``source``: the title of the claim's document (ClaimCase.document),
    where its expectation names none. A technique whose step gives a NaN or inf loss where
    the step without it does not (``breaks_training``) does not hold, whatever its ratio."""
    kept = {run.ratio_key: run.ratio, "ci_low": run.ci_low, "ci_high": run.ci_high, "rounds": run.rounds,
            "claimed_ratio": run.claimed_ratio, "bound": run.bound, "baseline": run.baseline,
            "variant": run.variant, **(metrics or {}), **run.measured}
    loaded = (loading_story(run.measured["loading"]) if run.measured.get("loading")
              and run.measured.get("stopped") != NOT_THE_BOTTLENECK else "")
    summary = (f"{run.ratio_key} {run.ratio:.3f} [{run.ci_low:.3f}, {run.ci_high:.3f}] against "
               f"{'< ' if run.kind == ClaimKind.LOWER else '<= '}{run.bound:.3f}" + (f"; {loaded}" if loaded else "")
               + f" (claimed {run.claimed_ratio:.3g}, {run.source or source})")
    if run.measured.get("peak"):  # where the peak is, what holds it, and what the technique can lower of it
        summary += f". {run.measured['peak']}"
    if run.measured.get("allocator_disagrees"):
        summary += f" Note: {run.measured['allocator_disagrees']}."
    broken, note = breaks_training(run.measured), loss_note(run.measured)
    if broken:
        kept["ratio_category"] = run.category   # what the ratio alone said
        return Verdict(CLAIM_STATUS[Category.DOES_NOT_HOLD], Category.DOES_NOT_HOLD,
                       f"the claim does not hold here: {broken}; {summary}", kept)
    lead = LEAD[run.category]
    if run.category == Category.INCONCLUSIVE and run.measured.get("stopped") in LEAD_STOPPED:
        lead = LEAD_STOPPED[run.measured["stopped"]].format(zone=run.measured.get("zone") or 0)
    if run.category == Category.INCONCLUSIVE and run.measured.get("stopped") == NOT_THE_BOTTLENECK:
        lead = not_the_bottleneck_lead(run.measured["loading"])
    if note:
        return Verdict(CLAIM_STATUS[run.category], run.category, f"{lead}{summary}. Note: {note}.", kept)
    return Verdict(CLAIM_STATUS[run.category], run.category,
                   "" if run.category == Category.HOLDS else lead + summary, kept)


# --------------------------------------------------------------------------- where the peak is

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


def weigh(w) -> dict:
    """One labelled, tracked step of ``w`` with the allocator's peak beside it:
    harness.optim.measure.weigh (where memory is measured), named here too, where a claim's
    memory is read."""
    from harness.optim import measure
    return measure.weigh(w)


ANATOMY_KEYS = ("parameters", "buffers", "gradients", "optimizer_state", "batch", "activations", "temporaries")


def anatomy_of(m: dict) -> dict:
    """What the peak is made of: bytes per category live at the peak moment (seed 003's
    columns), the phase, and the peak itself."""
    return {**{k: m["at_peak"].get(k, 0) for k in ANATOMY_KEYS}, "peak_bytes": m["peak_bytes"],
            "peak_phase": m["peak_phase"]}


def allocator_view(ma: dict, mb: dict, bound: Bound, category: str, basis: str) -> dict:
    """The device allocator's peaks beside the tracked bytes, and whether they would say
    otherwise about the claim (allocator bytes include block rounding and kernel workspaces).

    The allocator counts every tensor alive on the device: while one side's step is weighed,
    the other side's model and optimizer state too, and how much of it depends on the order the
    claims ran in (on an H200, 2.4 GiB more under one side than the other). Its raw peaks are
    kept (``allocator_peak_a`` / ``_b``); the claim is judged by its own rise over each step (its
    peak less what it held before the step began) on top of that step's resident tensors (the
    model, optimizer state and batch, adopted by name): ``allocator_own_peak_a`` / ``_b``.
    ``allocator_beyond_a`` / ``_b``: what the allocator saw the step add beyond the tracked
    storages (kernel workspaces, block rounding: 0 to 74 MiB a step on an H100 and an H200)."""
    a, b = ma.get("allocator_peak"), mb.get("allocator_peak")
    out = {"allocator_method": ma.get("allocator_method") or mb.get("allocator_method"),
           "allocator_peak_a": a, "allocator_peak_b": b}
    if a is None or b is None:
        out["allocator_reason"] = ma.get("allocator_reason") or mb.get("allocator_reason") or ""
        return out
    if ma.get("allocator_driver_peak") is not None:
        out.update(allocator_driver_peak_a=ma["allocator_driver_peak"],
                   allocator_driver_peak_b=mb.get("allocator_driver_peak"))
    if ma.get("allocator_held") is not None:
        out.update(allocator_held_a=ma["allocator_held"], allocator_held_b=mb.get("allocator_held"))
    judged_by, short = "peak", []
    if all(m.get(k) is not None for m in (ma, mb) for k in ("allocator_held", "baseline_bytes", "peak_bytes")):
        for side, m in (("a", ma), ("b", mb)):
            rise, made = m["allocator_peak"] - m["allocator_held"], m["peak_bytes"] - m["baseline_bytes"]
            out[f"allocator_own_peak_{side}"] = m["baseline_bytes"] + rise
            out[f"allocator_beyond_{side}"] = rise - made
            if rise < made - ALLOCATOR_SHORT * made - 2 ** 20:   # it rounds up, never down: not this step's reading
                short.append(f"{side}'s step rose by {rise / 2 ** 20:.1f} MiB, where its tracked storages made "
                             f"{made / 2 ** 20:.1f} MiB")
        a, b = out["allocator_own_peak_a"], out["allocator_own_peak_b"]
        judged_by = "rise over each step, on that side's resident tensors"
    by_allocator = ratios.compare_memory(a, b, bound)
    out["allocator_ratio"] = by_allocator["mem_ratio"]
    if short:
        out["allocator_disagrees"] = (f"the allocator ({out['allocator_method']}) saw less than the step made: "
                                      f"{'; '.join(short)}; its reading does not cover the step and confirms nothing")
    elif basis != "optimizer-state" and by_allocator["category"] != category:
        out["allocator_disagrees"] = (f"by the allocator ({out['allocator_method']}, its {judged_by}) "
                                      f"{SAYS[by_allocator['category']]}: ratio {by_allocator['mem_ratio']:.3f} "
                                      f"against {category} by the tracked storages")
    return out


# The allocator counts blocks rounded up from the storages the tracker counts, and workspaces
# besides: its rise over a step is at least what the step's storages made. Under that by more
# than this share (and a MiB), its reading is not of the step: a frozen counter, another device.
ALLOCATOR_SHORT = 0.01


def share(m: dict, categories) -> float:
    """The fraction of the peak held by ``categories`` at the peak moment."""
    return sum(m["at_peak"].get(c, 0) for c in categories) / m["peak_bytes"] if m["peak_bytes"] else 0.0


def makeup(m: dict, top: int = 3) -> str:
    """The ``top`` categories of the peak, largest first, as shares (\"activations 60%, ...\")."""
    parts = sorted(((v, k) for k, v in m["at_peak"].items() if v), reverse=True)[:top]
    return ", ".join(f"{k.replace('_', ' ')} {v / m['peak_bytes']:.0%}" for v, k in parts)


def peak_story(name: str, ma: dict, mb: dict) -> str:
    """Where each side's peak is and what holds it, and how much of it the technique can
    lower, in a user's terms."""
    mib = 2 ** 20
    text = (f"baseline peak {ma['peak_bytes'] / mib:.1f} MiB in the {ma['peak_phase']} phase ({makeup(ma)}); "
            f"with the technique {mb['peak_bytes'] / mib:.1f} MiB in the {mb['peak_phase']} phase ({makeup(mb)})")
    lowers = LOWERS.get(name)
    if lowers:
        what = " and ".join(c.replace("_", " ") for c in lowers)
        text += f"; {name} lowers {what}: {share(ma, lowers):.0%} of the baseline's peak"
    return text + "."


def single_tensor_alternative(wa, wb, name: str, bound: Bound, ma: dict, mb: dict) -> dict | None:
    """A memory claim that does not hold with the peak in AdamW's step: measure both sides
    again with AdamW one parameter at a time (``foreach=False``; CUDA's default is foreach,
    whose temporaries span every parameter at once) and say where the peak goes."""
    if "optimizer" not in (ma["peak_phase"], mb["peak_phase"]):
        return None
    if not (wa.setup.optimizer == wb.setup.optimizer and wa.setup.optimizer in ("adamw", "adamw-foreach")):
        return None
    from harness.optim import measure
    alt = [built(w.setup.but(optimizer=SINGLE_TENSOR), w.target) for w in (wa, wb)]
    aa, ab = (measure.weighed(w) for w in alt)
    res = ratios.compare_memory(aa["peak_bytes"], ab["peak_bytes"], bound)
    return {"optimizer": SINGLE_TENSOR, "mem_ratio": res["mem_ratio"], "verdict": res["category"],
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
    tail = f" (ratio {res['mem_ratio']:.3f}: {SAYS[res['category']]} there)."
    if alt_baseline["peak_phase"] == "optimizer":
        floor = share(alt_baseline, ("parameters", "buffers", "gradients", "optimizer_state"))
        return (head + f"the peak stays in the optimizer step, {floor:.0%} of it the weights, gradients and "
                f"optimizer state themselves, and {effect}" + tail)
    return head + f"the baseline's peak moves to the {alt_baseline['peak_phase']} phase and {effect}" + tail
