"""Known accelerator bugs: the wrong results users reported, as checks anyone can run.

OpInfo's samples are a few elements and the property checks draw sides up to a few
thousand. The silent wrong results users report against PyTorch's MPS backend live
elsewhere: a dimension just past 2^15 or 2^16, a result that depends on what the
allocator held before, a reduction that goes wrong when called in quick succession. Each
case here is one such report, confirmed in PyTorch's issue tracker (its number, title,
and the versions it names), rebuilt at the edge that exposes it.

Two checks per case and dtype, in the parity suite (suites/parity/test_known_bugs.py):

  parity/<case>/<dtype>/known-bug    the case's samples on the target against the float64
                                     reference, judged by the parity rules (on an
                                     accelerator: as accurate as the CPU, harness.parity.accuracy.
                                     compare_accuracy; on the CPU: the cpu target's rules
                                     against float64). Each sample runs once, once more after
                                     a dirty allocator cache (freed blocks full of NaN: a
                                     kernel that reads past its operands meets them), and for
                                     a case reported wrong "in rapid succession" RAPID_RUNS
                                     times back to back; the worst run counts. In full
                                     float32: TF32 off, since TF32 is a precision setting the
                                     op parity suite judges, and here a difference must be
                                     the bug. A target that raises where the CPU computes
                                     fails too ("raises"): with the MPS fallback on, an op
                                     should run, slowly, not stop.
  parity/<case>/<dtype>/repeatable   the same op on the same inputs, run back to back and
                                     again after a dirty and after an emptied cache, must give
                                     the first run's bits on the target. A difference is its
                                     own finding ("unrepeatable"): no tolerance excuses a
                                     deterministic op that changes its mind.

Sizes: a case's first size is its ``edge``, the smallest that still crosses the reported
edge (a side of 2^15 + 1, not a side of a million), or ``small`` where the report names
no edge; it is cheap on a 2-core CPU. Larger sizes go up to the reported shape. The CPU
and the stand-ins run the first size; an accelerator the largest whose working set fits
MEMORY_FRACTION of its memory reading (harness.core.sizing.memory_of) and of the host's RAM
(the CPU side and the float64 reference live there), and whose output stays within
JUDGED_MAX elements.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from harness.core import devices, outcomes
from harness.parity import tolerances
from harness.core.verdict import Verdict

GIB = 2**30
MEMORY_FRACTION = 0.25      # of the device's memory reading, and of the host's, for one case's working set
# Output elements a size may have: judging one (harness.parity.accuracy.compare_accuracy, about 30
# float64 passes on the host) takes about 8 s per 2**25 elements on a 2-core VM, and a
# check judges two runs of each sample within the sandbox's time limit.
JUDGED_MAX = 2**25 + 2**20
QUICK_REPEATS = 8           # back-to-back reruns in a repeatability check
RAPID_RUNS = {"cpu": 8, "stand-in": 8, "cuda": 500, "mps": 500}   # runs a ``rapid`` case's known-bug check judges
CHURNS = ("a dirty cache", "an emptied cache")   # the allocator states a rerun follows (Target.churn)
CHURN_SIZES = (1, 2)        # the churn's tensors, in multiples of each input's and the output's size
ISSUES = "https://github.com/pytorch/pytorch/issues/"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a case comes from: the PyTorch issue, as its tracker has it."""
    issue: int
    title: str
    affected: str            # the versions and machines the report names
    fixed: str = ""          # the fix, where the tracker shows one; "" = open or not known
    confirmed: str = ""      # what of the report was read in the tracker

    @property
    def url(self) -> str:
        return f"{ISSUES}{self.issue}"

    @property
    def label(self) -> str:
        return f"pytorch#{self.issue}"


@dataclasses.dataclass(frozen=True)
class Size:
    name: str                # "edge", "reported", ...
    dims: dict               # what the case's ``make`` takes
    shape: str               # in words, for the record


@dataclasses.dataclass(frozen=True)
class BugCase:
    """One reported wrong result as a check.

    ``make(dims)`` gives the samples: each a dict of named float64 (or integer) CPU tensors
    and plain values; ``fn(**sample)`` computes the op on them wherever they are. The
    first sample is the report's own inputs where it gives them (zeros against ones ...),
    the others random values of the same shapes, so a kernel that is only right for the
    report's values is still caught."""
    name: str
    source: Source
    op: str                  # the op's name in the tolerance table (harness.parity.tolerances)
    what: str                # the wrong result reported, in words
    make: Callable[[dict], list[dict]]
    fn: Callable
    sizes: tuple[Size, ...]  # the edge first, then larger ones for accelerators
    footprint: Callable[[dict], tuple[int, int]]   # elements of the inputs and of the output at dims (largest sample)
    dtypes: tuple[str, ...] = ("float32",)
    normwise: bool = True    # a sum of many terms: judged against the output's magnitude (harness.parity.accuracy)
    repeatable: bool = True  # a deterministic op: the repeatability check applies
    rapid: bool = False      # reported wrong intermittently in rapid succession: judge RAPID_RUNS runs

    @property
    def subject(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Check:
    """A case in one dtype and one kind of check, with the targets that run it (the ``cases`` marker)."""
    case: BugCase
    dtype: str
    kind: str                # "known-bug" | "repeatable"
    targets: tuple[str, ...]

    @property
    def subject(self) -> str:
        return self.case.name

    @property
    def variant(self) -> str:
        return f"{self.dtype}/{self.kind}"

    @property
    def id(self) -> str:
        return f"{self.case.name}-{self.dtype}"


def checks(kind: str, table: tuple[BugCase, ...] | None = None) -> list[Check]:
    from harness.parity.known_bug_cases import CASES
    every = devices.TARGETS + tuple(devices.STAND_INS)
    return [Check(case, dtype, kind, every) for case in (table or CASES)
            if kind == "known-bug" or case.repeatable for dtype in case.dtypes]


def by_name(name: str) -> BugCase:
    from harness.parity.known_bug_cases import CASES
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(f"no known-bug case {name!r}")


# --------------------------------------------------------------------------- sizes

def working_set(case: BugCase, size: Size, dtype: str) -> tuple[int, int]:
    """Bytes on the target (inputs and output in ``dtype``) and on the host (the CPU's copy
    in ``dtype``, the float64 reference, the target's result brought back)."""
    import torch
    item = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    n = sum(case.footprint(size.dims))
    return n * item, n * (2 * item + 8)


def choose_size(case: BugCase, target: str, dtype: str, memory: Callable[[str], tuple[int, str]] | None = None
                ) -> tuple[Size, str]:
    """The size a target runs and why: the edge on the CPU and on stand-ins; on an
    accelerator the largest size whose working set fits MEMORY_FRACTION of the device's
    memory reading and of the host's RAM, and whose output has at most JUDGED_MAX
    elements (the judging is on the host)."""
    edge = case.sizes[0]
    if devices.kind_of(target) in ("cpu", "stand-in") or len(case.sizes) == 1:
        return edge, ("the edge size: the CPU and stand-ins run the smallest size that crosses the reported edge"
                      if len(case.sizes) > 1 else "the case has one size")
    memory = memory or _memory
    dev_bytes, dev_how = memory(target)
    host_bytes, host_how = memory("host")
    for size in reversed(case.sizes):
        on_dev, on_host = working_set(case, size, dtype)
        if case.footprint(size.dims)[1] > JUDGED_MAX:
            continue
        if on_dev <= MEMORY_FRACTION * dev_bytes and on_host <= MEMORY_FRACTION * host_bytes:
            return size, (f"{size.name}: {on_dev / GIB:.2g} GiB on the device within {MEMORY_FRACTION:.0%} of "
                          f"{dev_bytes / GIB:.3g} GiB ({dev_how}), {on_host / GIB:.2g} GiB on the host within "
                          f"{MEMORY_FRACTION:.0%} of {host_bytes / GIB:.3g} GiB ({host_how})")
    return edge, (f"{edge.name}: no larger size fits {MEMORY_FRACTION:.0%} of the memory readings ({dev_bytes / GIB:.3g} "
                  f"GiB, {dev_how}; host {host_bytes / GIB:.3g} GiB, {host_how})")


def _memory(where: str) -> tuple[int, str]:
    """A memory reading: the host's available RAM, or the device's (harness.core.sizing.memory_of)."""
    if where == "host":
        import psutil
        return int(psutil.virtual_memory().available), "available RAM"
    from harness.core import sizing
    return sizing.memory_of(where)


# --------------------------------------------------------------------------- running a case

def _tensors(tree) -> list:
    import torch
    from torch.utils import _pytree
    return [x for x in _pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _cast(sample: dict, dtype, device) -> dict:
    """A sample's floating tensors in ``dtype`` on ``device``; integers and flags as they are.
    The dtype changes on the CPU, before the copy: MPS has no float64 to copy from."""
    import torch
    return {k: (v.to(dtype=dtype).to(device) if v.is_floating_point() else v.to(device))
            if isinstance(v, torch.Tensor) else v for k, v in sample.items()}


def _to_cpu(tree):
    import torch
    from torch.utils import _pytree
    return _pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


class Target:
    """Runs a case's op on a target: the device, or a stand-in computing on the CPU. Each
    run copies the inputs to the device anew, so a run after ``churn`` sees its operands
    wherever the allocator now puts them."""

    def __init__(self, target: str):
        self.name = target
        self.kind = devices.kind_of(target)
        self.stand_in = devices.stand_in(target)
        self.backend = devices.backend(target)
        self.device = self.backend.device()

    def run(self, case: BugCase, sample: dict, dtype, cpu=None, reference=None, times: int = 1):
        """The op in full float32: TF32 off (devices.tf32(False)). TF32 is a precision
        setting the op parity suite judges (its cause "tf32"); here a difference must be
        the bug. With ``times`` > 1 the inputs are copied once and the op is launched that
        many times back to back, nothing read back in between ("in rapid succession");
        the results come back as a list, brought to the host after the last launch."""
        args = _cast(sample, dtype, self.device)
        with devices.tf32(False):
            if self.stand_in is not None:
                results = [self.stand_in.run(lambda: case.fn(**args), cpu, reference) for _ in range(times)]
            else:
                results = [case.fn(**args) for _ in range(times)]
        return results[0] if times == 1 else [_to_cpu(r) for r in results]

    def sync(self) -> None:
        self.backend.synchronize()

    def clean(self) -> None:
        """Empty the allocator's cache after a check that dirtied it: the next check in this
        process starts from a clean state, as a fresh process would."""
        self.sync()
        self.backend.empty_cache()
        if self.stand_in is not None:
            self.stand_in.churned(True)

    def churn(self, like: list, empty: bool) -> None:
        """Allocate tensors the sizes of ``like`` (the inputs and the output) and twice that,
        fill them with NaN and free them: a kernel that reads past its operands now meets
        NaN there. ``empty``: then empty the allocator's cache too (the cure the reports
        name), so the next allocation is fresh memory."""
        import torch
        held = [torch.full((max(1, t.numel() * factor),), math.nan, device=self.device)
                for t in like for factor in CHURN_SIZES]
        held.append(torch.full((7,), math.nan, device=self.device))
        self.sync()
        del held
        if empty:
            self.backend.empty_cache()
        if self.stand_in is not None:
            self.stand_in.churned(empty)


def _reference(case: BugCase, sample: dict, dtype) -> object:
    """The float64 reference on the sample's values rounded to ``dtype`` (what the target sees)."""
    import torch
    rounded = _cast(_cast(sample, dtype, "cpu"), torch.float64, "cpu")
    return case.fn(**rounded)


def _runs(case: BugCase, kind: str) -> list[str]:
    """The runs a known-bug check judges on a target: the first; one after a dirty cache
    (the allocator's free blocks hold NaN); and for a case reported wrong in rapid
    succession, RAPID_RUNS launched back to back on inputs copied once (Target.run
    with ``times``)."""
    runs = ["first run", f"after {CHURNS[0]}"]
    if case.rapid:
        runs += [f"rapid run {i + 1}" for i in range(RAPID_RUNS.get(kind, RAPID_RUNS["cpu"]))]
    return runs


def run_case(name: str, target: str, dtype: str) -> dict:
    """A case's samples on ``target``, judged: the verdict of the worst run of the worst
    sample, with the size and why, each sample's margin, and where the worst error sits."""
    return _on_target(_run_case, name, target, dtype)


def _on_target(work, name: str, target: str, dtype: str) -> dict:
    """``work(case, target, dtype)``, then a clean allocator for the next check in this process."""
    tgt = Target(target)
    try:
        return work(by_name(name), tgt, dtype)
    finally:
        tgt.clean()


def _run_case(case: BugCase, tgt: Target, dtype: str) -> dict:
    import torch
    from torch.utils import _pytree
    from harness.parity import accuracy
    dt = getattr(torch, dtype)
    target = tgt.name
    size, why = choose_size(case, target, dtype)
    tol = tolerances.tolerance(case.op, dtype)
    out = {"case": case.name, "size": size.name, "shape": size.shape, "size_reason": why, "samples": 0, "runs": 0,
           "margins": [], "verdict": None, "raised": None, "cpu_raised": None}
    for index, sample in enumerate(case.make(size.dims)):
        ref = _reference(case, sample, dt)
        try:
            cpu = case.fn(**_cast(sample, dt, "cpu"))
        except Exception as exc:  # the CPU cannot compute it either: nothing to hold the target to
            out["cpu_raised"] = outcomes.error_line(exc, 300)
            return out
        out["samples"] += 1
        if target == "cpu":
            verdicts = [("first run", accuracy.compare(cpu, ref, tol, normwise=case.normwise))]
        else:
            rounded = _pytree.tree_map(
                lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x, ref)
            verdicts = []
            try:
                runs = _runs(case, tgt.kind)
                rapid = [r for r in runs if r.startswith("rapid run")]
                results = {}
                for run in runs:
                    if run == f"after {CHURNS[0]}":
                        tgt.churn(_tensors(sample) + _tensors(cpu), empty=False)
                    if rapid and run == rapid[0]:  # every rapid run launched back to back, then judged
                        results = dict(zip(rapid, tgt.run(case, sample, dt, cpu, rounded, times=len(rapid))))
                    result = results.pop(run, None)
                    if result is None:
                        result = _to_cpu(tgt.run(case, sample, dt, cpu, rounded))
                    verdict = accuracy.compare_accuracy(result, cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                                      tolerances.ACCURACY_ULPS, normwise=case.normwise)
                    if not verdict["ok"]:
                        verdict.update(where_worst(result, ref))
                        verdict.update(_diagnose(case, sample, dt, tgt, cpu, ref, rounded, result, tol))
                    verdicts.append((run, verdict))
                    if not verdict["ok"]:
                        break
            except Exception as exc:
                out["raised"] = outcomes.error_line(exc, 300)
                out["verdict"] = {"ok": False, "sample": index, "margin": math.inf, "max_abs_err": math.inf,
                                  "run": run, "reason": f"raised on the target where the CPU computes: "
                                                        f"{out['raised']}"}
                return out
        out["runs"] += len(verdicts)
        run, verdict = max(verdicts, key=lambda rv: (not rv[1]["ok"], rv[1]["margin"]))
        verdict.update(sample=index, run=run)
        out["margins"].append(verdict["margin"])
        best = out["verdict"]
        if best is None or (not verdict["ok"], verdict["margin"]) > (not best["ok"], best["margin"]):
            out["verdict"] = verdict
    out["tolerance"] = tol.source
    return out


def where_worst(result, ref) -> dict:
    """The index of the element farthest from the reference (first output), and how many
    elements are off by more than a tenth of that: a bug at an edge shows as a wrong block
    starting at the edge ("wrong past column 1024")."""
    import torch
    r, e = _tensors(result), _tensors(ref)
    if not r or not e or r[0].shape != e[0].shape or r[0].numel() == 0 or not r[0].is_floating_point():
        return {}
    err = (r[0].to(torch.float64) - e[0].to(torch.float64)).abs().nan_to_num(nan=math.inf)
    flat = int(err.argmax())
    worst = float(err.flatten()[flat])
    if worst == 0:
        return {}
    index = list(map(int, torch.unravel_index(torch.tensor(flat), err.shape))) if err.dim() else []
    off = err > worst / 10
    first = int(off.flatten().nonzero()[0]) if bool(off.any()) else flat
    return {"worst_index": index, "off_elements": int(off.sum()),
            "first_off_index": list(map(int, torch.unravel_index(torch.tensor(first), err.shape))) if err.dim()
            else []}


def _diagnose(case: BugCase, sample: dict, dt, tgt: Target, cpu, ref, rounded, first, tol) -> dict:
    """Why a sample failed, by differential reruns (harness.parity.causes): in float32 for a
    half-precision case. A cause counts only where a plain rerun fails
    again: a switch cannot explain a failure that comes and goes (``intermittent``). A
    cause found means the difference is that switch, not the reported bug."""
    import torch
    from torch.utils import _pytree
    from harness.parity import accuracy, causes

    def passes(result) -> bool:
        return accuracy.compare_accuracy(_to_cpu(result), cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                       tolerances.ACCURACY_ULPS, normwise=case.normwise)["ok"]

    if passes(tgt.run(case, sample, dt, cpu, rounded)):
        return {"intermittent": True}

    def rerun(trial: str):
        # "nondeterministic" is not asked: a result that changes between runs is this
        # suite's repeatability finding, not an excuse for a wrong one; "tf32" neither:
        # every run is in full float32 already (Target.run)
        if trial == "reduced-precision":
            wide = tgt.run(case, sample, torch.float32, cpu, rounded)
            return passes(_pytree.tree_map(
                lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, wide))
        return None
    kind = devices.kind_of(tgt.name)
    dtype = str(dt).removeprefix("torch.")
    return causes.describe(causes.diagnose(kind, dtype, rerun), kind, dtype)


def _same(a, b) -> bool:
    """The same bits, NaN for NaN."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return torch.equal(a, b)


def run_repeatability(name: str, target: str, dtype: str) -> dict:
    """The case's last sample (random values) on ``target``: once, then QUICK_REPEATS
    times back to back, then after each allocator state of CHURNS; every result must have
    the first's bits. Returns the runs that differed, and by how much."""
    return _on_target(_run_repeatability, name, target, dtype)


def _run_repeatability(case: BugCase, tgt: Target, dtype: str) -> dict:
    import torch
    dt = getattr(torch, dtype)
    target, name = tgt.name, case.name
    size, why = choose_size(case, target, dtype)
    sample = case.make(size.dims)[-1]
    out = {"case": name, "size": size.name, "shape": size.shape, "size_reason": why, "runs": 0, "differing": [],
           "max_abs_diff": 0.0, "raised": None}
    try:
        first = _tensors(tgt.run(case, sample, dt))
        runs = [(f"back-to-back run {i + 1}", None) for i in range(QUICK_REPEATS)] + [
            (f"run after {how}", how) for how in CHURNS]
        for label, how in runs:
            if how is not None:
                tgt.churn(_tensors(sample) + first, empty=how == CHURNS[1])
            again = _tensors(tgt.run(case, sample, dt))
            out["runs"] += 1
            if len(again) != len(first) or not all(_same(a, b) for a, b in zip(again, first)):
                diff = max((float((a.double() - b.double()).abs().nan_to_num(nan=math.inf).max())
                            for a, b in zip(again, first) if a.shape == b.shape and a.numel()), default=math.inf)
                out["differing"].append(label)
                out["max_abs_diff"] = max(out["max_abs_diff"], diff)
    except Exception as exc:
        out["raised"] = outcomes.error_line(exc, 300)
    return out


# --------------------------------------------------------------------------- judging

def source_metrics(case: BugCase, kind: str = "known-bug") -> dict:
    """Where a case comes from, as metrics of its ``kind`` of record (harness.core.records:
    "known-bug" or "repeatable")."""
    s = case.source
    return {"record_kind": kind, "known_bug": case.name, "issue": s.issue, "issue_url": s.url, "issue_title": s.title,
            "affected": s.affected, "fixed": s.fixed, "reported": case.what}


def judge(result: dict) -> Verdict:
    """A known-bug check's status from run_case's result."""
    case = by_name(result["case"])
    metrics = {**source_metrics(case), "size": result["size"], "shape": result["shape"],
               "size_reason": result["size_reason"], "samples": result["samples"], "runs": result.get("runs", 0)}
    if result.get("cpu_raised"):
        return Verdict("skip", "n/a", f"the CPU cannot compute this case here either ({result['cpu_raised']})",
                         metrics)
    verdict = result["verdict"]
    for key in ("max_abs_err", "max_rel_err", "margin", "cpu_max_abs_err", "rule", "worst_index",
                "first_off_index", "off_elements", "cause", "cause_what", "switch", "run", "intermittent"):
        if verdict.get(key) not in (None, ""):
            metrics[key] = verdict[key]
    metrics.update(worst_sample=verdict.get("sample"), tolerance_source=result.get("tolerance"))
    where = f"{case.source.label} ({case.source.title})"
    if result.get("raised"):
        return Verdict("fail", "raises", f"raises where the CPU computes: {result['raised']}; the bug of {where} "
                         f"({case.what}) at {result['shape']}; report it to PyTorch with this shape", metrics)
    if verdict["ok"]:
        return Verdict("pass", "parity", f"not affected by {where} at {result['shape']}", metrics)
    block = (f"; first element off at {verdict['first_off_index']}, {verdict['off_elements']} element(s) off"
             if verdict.get("first_off_index") else "")
    if verdict.get("cause") not in (None, "unexplained"):
        cause = f"; not the reported bug: {verdict['cause_what']}; {verdict['switch']}"
    else:
        cause = (f"; {'wrong in this run and right when rerun; ' if verdict.get('intermittent') else ''}this machine "
                 f"shows the bug of {where}: {case.what}; avoid the shape or report it to PyTorch with this record")
    return Verdict("fail", "parity", f"sample {verdict.get('sample')}, {verdict.get('run')}, at {result['shape']}: off float64 by "
                     f"{verdict['max_abs_err']:.3g}, margin {verdict['margin']:.3g}{block}{cause}. {verdict['reason']}",
                     metrics)


def judge_repeatability(result: dict) -> Verdict:
    case = by_name(result["case"])
    metrics = {**source_metrics(case, "repeatable"), "size": result["size"], "shape": result["shape"],
               "size_reason": result["size_reason"], "runs": result["runs"], "quick_repeats": QUICK_REPEATS,
               "churns": list(CHURNS)}
    if result.get("raised"):
        return Verdict("skip", "n/a", f"no result to repeat: {result['raised']} (see this case's known-bug check)",
                         metrics)
    if not result["differing"]:
        return Verdict("pass", "repeatable", f"{result['runs']} reruns ({QUICK_REPEATS} back to back, then after "
                         f"{' and after '.join(CHURNS)}) gave the first run's bits", metrics)
    metrics.update(differing=result["differing"], max_abs_diff=result["max_abs_diff"])
    return Verdict("fail", "unrepeatable",
                     f"the same op on the same inputs gave other bits in {len(result['differing'])} of "
                     f"{result['runs']} reruns ({', '.join(result['differing'][:4])}; largest difference "
                     f"{result['max_abs_diff']:.3g}) at {result['shape']}: results depend on what ran or was "
                     f"allocated before, as in {case.source.label} ({case.source.title}); synchronize and empty "
                     f"the cache (torch.mps.synchronize(); torch.mps.empty_cache()) around the op as a stopgap, "
                     f"and report it to PyTorch with this record", metrics)
