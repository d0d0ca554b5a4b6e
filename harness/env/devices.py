"""The targets: one Backend per target (availability with a reason, synchronize, memory,
dtypes), the stand-in targets, the memory a check may plan with, and the TF32 switch.

Every torch API that is newer than the oldest supported torch is reached through
``getattr`` so an older install reports "not offered" instead of raising.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings

from harness.core.records import CANNOT_TELL, Category, Status, Verdict
from harness.env import facts as facts_mod, fitness

TARGETS = ("cpu", "cuda", "mps")


@dataclasses.dataclass(frozen=True)
class Availability:
    available: bool
    reason: str


class Backend:
    name: str = ""

    def __init__(self, facts: dict | None):
        self._facts = facts

    @property
    def facts(self) -> dict:
        """Gathered on first use: the CPU backend never needs them (they import torch)."""
        if self._facts is None:
            self._facts = facts_mod.current()
        return self._facts

    # -- identity
    def availability(self) -> Availability:
        raise NotImplementedError

    def device(self):
        import torch
        return torch.device(self.name)

    # -- execution
    def synchronize(self) -> None:
        pass

    def empty_cache(self) -> None:
        """Give the caching allocator's free blocks back (torch.cuda / torch.mps.empty_cache);
        the CPU keeps no such cache."""

    # -- memory, in bytes; None where the device does not offer the reading
    def memory_current(self) -> int | None:
        raise NotImplementedError

    def memory_peak(self) -> int | None:
        return None

    def reset_peak(self) -> bool:
        """Start a new peak window; False where the device keeps no peak."""
        return False

    # -- dtypes
    def dtypes(self) -> list:
        import torch
        return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                torch.int64, torch.int32, torch.uint8, torch.bool]

    def autocast_probe(self, dtype) -> tuple[bool, str]:
        """Run a matmul under autocast; True when its result comes out in ``dtype``.

        torch disables autocast with a warning (rather than raising) for a dtype a device
        does not support, so a warning or a float32 result both mean "not usable".
        """
        import torch
        amp = getattr(torch, "amp", None)
        if amp is None or not hasattr(torch, "autocast"):
            return False, "torch.autocast missing"
        dev = self.device()
        a = torch.ones(8, 8, device=dev)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch.autocast(device_type=dev.type, dtype=dtype):
                    out = a @ a
            self.synchronize()
        except Exception as exc:  # an unsupported dtype may raise on some versions
            return False, f"{type(exc).__name__}: {exc}".splitlines()[0]
        if out.dtype != dtype:
            note = next((str(w.message).splitlines()[0] for w in caught), "")
            return False, f"autocast produced {out.dtype}" + (f" ({note})" if note else "")
        return True, f"matmul under autocast gives {dtype}"


class CPUBackend(Backend):
    name = "cpu"

    def availability(self) -> Availability:
        return Availability(True, "the CPU is always present")

    def memory_current(self) -> int | None:
        try:
            import psutil
        except ImportError:
            return None
        return int(psutil.Process().memory_info().rss)


class CUDABackend(Backend):
    name = "cuda"

    def availability(self) -> Availability:
        present = fitness.judge_cuda_present(self.facts)
        if present.outcome == fitness.OK:
            return Availability(True, present.summary)
        return Availability(False, "CUDA unavailable: " + present.message().removeprefix("not applicable: "))

    def synchronize(self) -> None:
        import torch
        torch.cuda.synchronize()

    def empty_cache(self) -> None:
        import torch
        torch.cuda.empty_cache()

    def memory_current(self) -> int | None:
        import torch
        return int(torch.cuda.memory_allocated())

    def memory_peak(self) -> int | None:
        import torch
        return int(torch.cuda.max_memory_allocated())

    def reset_peak(self) -> bool:
        import torch
        torch.cuda.reset_peak_memory_stats()
        return True

    def dtypes(self) -> list:
        import torch
        types = super().dtypes()
        if not torch.cuda.is_bf16_supported():
            types.remove(torch.bfloat16)
        return types


class MPSBackend(Backend):
    name = "mps"

    def availability(self) -> Availability:
        cause = fitness.mps_unavailable_cause(self.facts)
        if cause is None:
            return Availability(True, "torch.backends.mps.is_available() is True")
        return Availability(False, f"{cause[0]}; to fix: {cause[1]}")

    def _mps(self):
        import torch
        return getattr(torch, "mps", None)

    def synchronize(self) -> None:
        mps = self._mps()
        if mps is not None and hasattr(mps, "synchronize"):
            mps.synchronize()

    def empty_cache(self) -> None:
        fn = getattr(self._mps(), "empty_cache", None)   # torch >= 2.0
        if fn is not None:
            fn()

    def memory_current(self) -> int | None:
        fn = getattr(self._mps(), "current_allocated_memory", None)
        return int(fn()) if fn else None

    def memory_driver(self) -> int | None:
        fn = getattr(self._mps(), "driver_allocated_memory", None)
        return int(fn()) if fn else None

    def _accelerator_stats(self):
        """torch.accelerator peak counters serve MPS from torch 2.13 (earlier they raise for mps); a
        feature, so a 2.13 pre-release or nightly counts as 2.13 (fitness.has_feature)."""
        import torch
        tv = fitness.torch_version(self.facts)
        acc = getattr(torch, "accelerator", None)
        if not fitness.has_feature(tv, ACCELERATOR_STATS_SINCE) or acc is None:
            return None
        return acc if hasattr(acc, "max_memory_allocated") and hasattr(acc, "reset_peak_memory_stats") else None

    def memory_peak(self) -> int | None:
        acc = self._accelerator_stats()
        return int(acc.max_memory_allocated()) if acc else None

    def reset_peak(self) -> bool:
        acc = self._accelerator_stats()
        if acc is None:
            return False
        acc.reset_peak_memory_stats()
        return True

    def dtypes(self) -> list:
        import torch
        # No float64 on MPS (LACKS, below); bf16 and complex need macOS 14 and torch 2.3: the
        # torch 2.2 binary says "BFloat16 is not supported on MPS" and "Complex types are
        # unsupported on MPS" whatever the macOS, 2.3's "MPS BFloat16 is only supported on
        # MacOS 14 or newer" (macOS arm64 wheels, libtorch_cpu.dylib). 2.2 is the Intel Macs'
        # last torch, and they run macOS 14.
        types = [torch.float32, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]
        mv, tv = fitness.macos_version(self.facts), fitness.torch_version(self.facts)
        if fitness.has_feature(mv, "14") and (tv is None or fitness.has_feature(tv, HALF_AND_COMPLEX_SINCE)):
            types += [torch.bfloat16, torch.complex64]
        return types


ACCELERATOR_STATS_SINCE = "2.13"   # MPSBackend._accelerator_stats: torch.accelerator's peak counters serve MPS
HALF_AND_COMPLEX_SINCE = "2.3"   # MPSBackend.dtypes: bfloat16 and complex64 on MPS from torch 2.3 (and macOS 14)

_BACKENDS = {"cpu": CPUBackend, "cuda": CUDABackend, "mps": MPSBackend}

# The dtypes a device does not have at all, by its rules (rules_of): MPS has no float64
# (MPSBackend.dtypes; its error: "Cannot convert a MPS Tensor to float64 dtype").
LACKS = {"mps": ("float64", "complex128")}


# --------------------------------------------------------------------------- memory to plan with

GIB = 2 ** 30
CPU_MEMORY_CAP = 8 * GIB  # the CPU trains the small shapes only, however much RAM the machine has


def memory_of(device: str) -> tuple[int, str]:
    """The memory a check may plan with on ``device`` ("cuda:0", "mps", "cpu"), and where the
    figure comes from: free memory on CUDA (``torch.cuda.mem_get_info``), the Metal
    working-set limit on MPS (``torch.mps.recommended_max_memory``, from torch 2.5) less what
    this process's Metal heap already holds (``driver_allocated_memory``: the limit does not
    shrink as the process allocates, so a second sizing would plan as if nothing were
    resident), and on the CPU the
    available RAM capped at CPU_MEMORY_CAP, so a big server does not train a large model on
    its CPU (harness.optim.workloads sizes the training shape with it)."""
    import torch
    kind = device.split(":")[0]
    if kind == "cuda":
        free, total = torch.cuda.mem_get_info()
        return int(free), f"free of {total / GIB:.3g} GiB, torch.cuda.mem_get_info"
    if kind == "mps":
        mps = getattr(torch, "mps", None)
        fn = getattr(mps, "recommended_max_memory", None)
        if fn is not None:
            held = getattr(mps, "driver_allocated_memory", None)
            used = int(held()) if held is not None else 0
            return (max(int(fn()) - used, 0),
                    "torch.mps.recommended_max_memory" + (" less torch.mps.driver_allocated_memory" if held else ""))
    import psutil
    available = int(psutil.virtual_memory().available)
    if kind == "cpu":
        return min(available, CPU_MEMORY_CAP), (f"available RAM capped at {CPU_MEMORY_CAP / GIB:g} GiB"
                                                 if available > CPU_MEMORY_CAP else "available RAM")
    return available, "available RAM (torch offers no device memory reading here)"


# --------------------------------------------------------------------------- stand-in targets

class StandIn:
    """A target that takes the accelerator path on the CPU while differing from the CPU the
    way a real accelerator can: rounding, reordering, TF32, another order of ties. The
    parity suites' self-tests use them (tests/standins.py registers them); anyone without
    a GPU can run ``pytest suites/ -m parity -p tests.standins --device standin-tf32``.

    ``run`` gives the target's result: by default ``compute()`` (the computation on the
    CPU) inside ``context()``, then ``finish`` on its result, given the CPU's result in the
    same dtype and the float64 reference rounded to that dtype (None where there is
    none). A stand-in is never a default target and serves the suites in ``suites`` only.

    An *emulating* stand-in (``emulates = "mps"``) is a whole device built from facts: the
    suites take that device's branches for it (``rules_of``), run its device work inside
    ``context()`` (ops that the device lacks fall back or raise there, its dtypes are
    refused there), read its memory and queue through ``backend()``, and judge its
    environment from ``facts()`` (a recorded machine). It is still the CPU underneath and
    the report shows it as emulated, never as that device.
    """
    name = ""
    summary = ""
    suites: tuple[str, ...] = ("parity",)
    emulates: str | None = None     # "mps": the device whose rules and branches apply

    def run(self, compute, cpu, reference):
        with self.context():
            result = compute()
        return self.finish(result, cpu, reference)

    def context(self):
        return contextlib.nullcontext()

    def device_names(self):
        """A context in which the emulated device's own name (``"mps:0"``, as code written for
        the device passes it in ``device=`` or to ``.to``) places tensors where this stand-in's
        work runs: OpInfo's sample functions, which choose their samples by the device's name
        (no float64 operands for MPS), make the device's samples there. A stand-in that
        emulates no device has no name of its own: nothing changes."""
        return contextlib.nullcontext()

    def bare(self):
        """A context with the emulation's own machinery and none of the device's rules (for
        the emulated Mac, a dispatch mode that passes every op through): a result that is
        already wrong under it is the machinery's doing, not the device's (torch 2.15's
        complex64 ``linalg.pinv`` on the CPU is off by O(1) under any dispatch mode). A
        stand-in that emulates no device has no machinery of its own: nothing changes."""
        return contextlib.nullcontext()

    def finish(self, result, cpu, reference):
        return result

    def host(self):
        """The context for the harness's own arithmetic on results already copied to the CPU,
        inside ``context()`` (``host_work``): a stand-in whose device rules or result changes
        act on CPU tensors lifts them here, as a real device's rules end at ``.cpu()``."""
        return contextlib.nullcontext()

    def churned(self, emptied: bool) -> None:
        """The check just churned the allocator (harness.parity.known_bugs.target.Target.churn) and, if
        ``emptied``, emptied its cache: a stand-in whose results depend on that state
        hears of it here."""

    def backend(self, facts: dict | None) -> "Backend":
        """The Backend the suites use for this target (memory, synchronize, dtypes)."""
        return StandInBackend(facts, self)

    def facts(self) -> dict | None:
        """The machine facts the env suite judges for this target (an emulated device's
        recorded machine); None: this machine's own."""
        return None


class BeyondEmulation(Exception):
    """An emulating stand-in cannot tell what the device would do here (the CPU it runs on
    lacks what the device has: a kernel for this dtype, say). A check that meets it is
    skipped with this reason, never judged: only the device itself can answer it."""


def beyond_emulation(detail: str | None) -> bool:
    """Whether an error line (harness.core.records.error_line, a sandbox outcome's detail)
    is an emulated device's BeyondEmulation."""
    return (detail or "").startswith(f"{BeyondEmulation.__name__}: ")


def cannot_tell(message: str, metrics: dict | None = None):
    """The verdict of a check an emulated device cannot answer: skipped with ``message``,
    marked ``emulation_cannot_tell`` so the report counts it apart from the checks it ran."""
    return Verdict(Status.SKIP, Category.NA, message, {**(metrics or {}), CANNOT_TELL: True})


DOUBT = "mps_compat_emulation_doubt"


def doubted(exc: BaseException, why: str) -> BaseException:
    """``exc``, the device's own error as an emulating stand-in raised it, marked with why the
    stand-in cannot be sure the device would get there (``why``: torch's code on the CPU's
    path converted an operand to a dtype the device lacks, where the device's path may keep
    the operand's). The error itself is unchanged: code under test sees what the device
    raises. A judge holding a fact that says the device does not fail here (PyTorch's own
    MPS tests expecting a pass) skips the check with this reason instead of failing it."""
    setattr(exc, DOUBT, why)
    return exc


def doubt_of(exc: BaseException) -> str:
    """Why an emulating stand-in doubts ``exc`` (``doubted``), or ""."""
    return getattr(exc, DOUBT, "")


STAND_INS: dict[str, StandIn] = {}


def register_stand_in(stand_in: StandIn) -> None:
    STAND_INS[stand_in.name] = stand_in


def stand_in(name: str) -> StandIn | None:
    return STAND_INS.get(name)


@contextlib.contextmanager
def host_work():
    """The harness's own arithmetic on results already on the CPU, done inside a device's
    context (an LU compared as P @ L @ U in float64: harness.parity.numerics.outputs.DEFINED):
    nothing changes on a real device, whose rules end at ``.cpu()``; every stand-in lifts its
    rules and changes (``StandIn.host``), for their tensors are the CPU's throughout."""
    with contextlib.ExitStack() as stack:
        for si in STAND_INS.values():
            stack.enter_context(si.host())
        yield


def synchronizer(device: str):
    """The function that waits for ``device``'s queued work ("cuda:0", "mps"); a no-op for
    a device without a queue (the CPU, ``meta``)."""
    kind = device.split(":")[0]
    if kind not in _BACKENDS and kind not in STAND_INS:
        return lambda: None
    return backend(kind).synchronize


def kind_of(target: str) -> str:
    """"cpu", "cuda", "mps", or "stand-in": which device a target's work is placed on (a
    stand-in's on the CPU: ``place``) and which knobs it has."""
    return "stand-in" if target in STAND_INS else target


def rules_of(target: str) -> str:
    """The device whose rules and branches apply to a target: an emulating stand-in's device
    ("mps" for the emulated Mac), else ``kind_of``. The suites' device-specific branches
    (PyTorch's MPS expectations, dtype and version gates, fallback causes) ask this."""
    si = STAND_INS.get(target)
    return si.emulates if si is not None and si.emulates else kind_of(target)


def is_emulated(target: str) -> bool:
    si = STAND_INS.get(target)
    return si is not None and bool(si.emulates)


def place(target: str) -> str:
    """The torch device a target's tensors live on: "cpu" for a stand-in, else the target."""
    return "cpu" if target in STAND_INS else target


def on_device(target: str):
    """The context a target's device work runs in: a stand-in's ``context()`` (an emulated
    device's rules), nothing for a real device."""
    si = STAND_INS.get(target)
    return si.context() if si is not None else contextlib.nullcontext()


def device_names(target: str):
    """The context in which code written for the device a target emulates may name that
    device (``StandIn.device_names``); nothing for any other target."""
    si = STAND_INS.get(target)
    return si.device_names() if si is not None else contextlib.nullcontext()


def facts_for(target: str, facts: dict) -> dict:
    """The machine facts to judge ``target``'s environment by: an emulating stand-in's
    recorded machine, else ``facts`` (this machine's)."""
    si = STAND_INS.get(target)
    own = si.facts() if si is not None else None
    return own if own is not None else facts


class StandInBackend(CPUBackend):
    def __init__(self, facts: dict | None, stand_in: StandIn):
        super().__init__(facts)
        self.stand_in, self.name = stand_in, stand_in.name

    def availability(self) -> Availability:
        return Availability(True, f"a stand-in on the CPU: {self.stand_in.summary}")

    def device(self):
        import torch
        return torch.device("cpu")


def backend(name: str, facts: dict | None = None) -> Backend:
    if name in STAND_INS:
        return STAND_INS[name].backend(facts)
    if name not in _BACKENDS:
        raise KeyError(f"unknown target {name!r}; known: {', '.join(TARGETS + tuple(STAND_INS))}")
    return _BACKENDS[name](facts)


def parse_device_option(value: str | None) -> list[str]:
    """``--device`` value to a target list. Raises ValueError with a one-line message.
    The default (all) is the real targets; a registered stand-in only by its name."""
    if value is None or value.strip() in ("", "all"):
        return list(TARGETS)
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    if not names:   # "," or ", ,": a run that would select nothing and end without a word
        raise ValueError(f"--device {value!r} names no target: cpu, cuda, mps, comma-separated, or all")
    known = TARGETS + tuple(STAND_INS)
    unknown = [n for n in names if n not in known]
    if unknown:
        extra = ("; stand-ins (tests/standins.py): load them with -p tests.standins"
                 if any(n.startswith("standin-") for n in unknown) and not STAND_INS else "")
        raise ValueError(f"--device: unknown target {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(known)} (comma-separated) or all{extra}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def tf32(enabled: bool):
    """Float32 matmuls and convolutions may (``True``) or may not (``False``) use TF32, in the
    block only; the process-wide switches are put back after.

    TF32 is what CUDA GPUs from Ampere on use for float32 when allowed: cuBLAS matmuls
    (``torch.backends.cuda.matmul.allow_tf32``, default False since torch 1.12) and cuDNN
    convolutions (``torch.backends.cudnn.allow_tf32``, default True; from torch 2.9 also
    spelled ``fp32_precision``). Once ``torch.testing._internal.common_utils`` is imported
    in a process (OpInfo imports it) a plain assignment to a cudnn flag raises ("not
    allowed to set torch.backends.cudnn flags after disable_global_flags"), so cuDNN's is
    set with its own ``flags()`` context. That context sets every flag it takes, with
    defaults that are not the current values (``enabled=False``), so each one is passed
    as it is now; its parameters differ between torch versions, hence the signature.
    The matmul switch is a plain attribute that no freeze guards.
    """
    import inspect

    import torch
    cudnn = torch.backends.cudnn
    keep = {name: getattr(cudnn, name) for name in inspect.signature(cudnn.flags).parameters
            if name != "allow_tf32" and hasattr(cudnn, name)}
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch >= 2.9 suggests the fp32_precision spelling
        matmul.allow_tf32 = bool(enabled)
    try:
        with cudnn.flags(**keep, allow_tf32=bool(enabled)):
            yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            matmul.allow_tf32 = before
