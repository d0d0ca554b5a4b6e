"""Environment facts, gathered once, and pure functions that judge them.

``collect()`` reads the machine (platform, architecture, Rosetta, macOS, chip, package
versions, torch build flags). Everything it returns is plain JSON, so a fact set can be
recorded on one machine and replayed on another: the self-tests judge recorded fact sets
of an Apple-silicon Mac, a Python under Rosetta, an Intel Mac, macOS 12.2, a torch built
without MPS, and Linux.

The judges take a fact set and return a ``Fitness``; they never touch the machine.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.core import process_env

FACTS_SCHEMA = 1

PACKAGES = ("torch", "transformers", "datasets", "accelerate", "tokenizers", "huggingface_hub",
            "safetensors", "numpy", "pytest", "pytest-xdist", "hypothesis")


# --------------------------------------------------------------------------- gathering

def _run(cmd: list[str], env: dict | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                             env={**os.environ, **(env or {})})
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def normalize_arch(machine: str | None) -> str | None:
    if not machine:
        return None
    m = machine.lower()
    return {"aarch64": "arm64", "arm64": "arm64", "amd64": "x86_64", "x86_64": "x86_64",
            "i386": "x86", "i686": "x86"}.get(m, m)


_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "arm64", 0x03: "x86", 0x28: "arm", 0xF3: "riscv64", 0x15: "ppc64"}
_MACHO_CPUS = {0x01000007: "x86_64", 0x0100000C: "arm64", 0x7: "x86", 0xC: "arm"}


def binary_archs(path: str | os.PathLike) -> list[str]:
    """CPU architectures a native library was built for (ELF, Mach-O, or universal Mach-O)."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head[:4] == b"\x7fELF":
        endian = "<" if head[5] == 1 else ">"
        (machine,) = struct.unpack_from(endian + "H", head, 18)
        return [_ELF_MACHINES.get(machine, f"elf-{machine:#x}")]
    magic_le = struct.unpack_from("<I", head, 0)[0]
    if magic_le in (0xFEEDFACF, 0xFEEDFACE):  # thin Mach-O, little-endian
        (cpu,) = struct.unpack_from("<I", head, 4)
        return [_MACHO_CPUS.get(cpu, f"macho-{cpu:#x}")]
    magic_be = struct.unpack_from(">I", head, 0)[0]
    if magic_be in (0xCAFEBABE, 0xCAFEBABF):  # universal binary: a list of slices
        (count,) = struct.unpack_from(">I", head, 4)
        step = 20 if magic_be == 0xCAFEBABE else 32
        archs = []
        for i in range(min(count, 16)):
            (cpu,) = struct.unpack_from(">I", head, 8 + i * step)
            archs.append(_MACHO_CPUS.get(cpu, f"macho-{cpu:#x}"))
        return archs
    return []


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution in ``names`` (None: not installed)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _mac_facts() -> dict | None:
    if sys.platform != "darwin":
        return None
    version = platform.mac_ver()[0] or None
    if version == "10.16":  # a Python built against an old SDK sees the compatibility version
        version = _run(["sw_vers", "-productVersion"], env={"SYSTEM_VERSION_COMPAT": "0"}) or version
    translated = _run(["sysctl", "-n", "sysctl.proc_translated"])
    hw_arm64 = _run(["sysctl", "-n", "hw.optional.arm64"])
    return {
        "version": version,
        # 1 under Rosetta 2; the key is absent (error) on Intel Macs.
        "proc_translated": translated == "1",
        # 1 on Apple silicon, also when this process runs under Rosetta.
        "hw_arm64": hw_arm64 == "1",
        "chip": _run(["sysctl", "-n", "machdep.cpu.brand_string"]),
        "model": _run(["sysctl", "-n", "hw.model"]),
    }


def _cpu_model() -> str | None:
    if sys.platform == "darwin":
        return _run(["sysctl", "-n", "machdep.cpu.brand_string"])
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def _nvidia_driver() -> str | None:
    try:
        return parse_nvidia_driver(Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        return None


def parse_nvidia_driver(text: str) -> str:
    """The driver version in ``/proc/driver/nvidia/version``, whose first line is spelled
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  <date>" by the proprietary
    module and "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release
    Build ..." by the open one (aarch64 likewise; versions of two or three numbers): the
    first whole word of dotted numbers after "Kernel Module". A file of another shape
    gives its first line, so the driver's presence is still known.
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    match = re.search(r"Kernel Module\b.*?(?<!\S)(\d+(?:\.\d+)+)(?!\S)", first)
    return match.group(1) if match else first[:80]


def _torch_facts() -> dict:
    try:
        import torch
    except Exception as exc:  # a broken install is a fact too
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    facts: dict = {"importable": True, "version": torch.__version__,
                   "debug": bool(getattr(torch.version, "debug", False)),
                   "cuda_build": getattr(torch.version, "cuda", None),
                   "hip_build": getattr(torch.version, "hip", None)}
    mps = getattr(torch.backends, "mps", None)
    facts["mps_built"] = bool(mps and mps.is_built())
    facts["mps_available"] = bool(mps and mps.is_available())
    facts["cuda_available"] = bool(torch.cuda.is_available())
    facts["cuda_arch_list"] = list(torch.cuda.get_arch_list()) if facts["cuda_build"] else []
    devices = []
    if facts["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append({"name": props.name, "capability": list(torch.cuda.get_device_capability(i)),
                            "total_memory": int(props.total_memory)})
        facts["cuda_bf16"] = bool(torch.cuda.is_bf16_supported())
    facts["cuda_devices"] = devices
    cpu_backend = getattr(torch.backends, "cpu", None)
    get_cap = getattr(cpu_backend, "get_cpu_capability", None)
    facts["cpu_capability"] = get_cap() if get_cap else None
    facts["num_threads"] = torch.get_num_threads()
    return facts


def _tokenizers_facts() -> dict:
    spec = importlib.util.find_spec("tokenizers")
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False}
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    binaries = sorted(p for p in pkg_dir.glob("tokenizers*") if p.suffix in (".so", ".pyd", ".dylib"))
    facts: dict = {"installed": True, "binary": str(binaries[0]) if binaries else None}
    facts["binary_archs"] = binary_archs(binaries[0]) if binaries else []
    try:
        import tokenizers  # noqa: F401  (the import itself is the check)
        facts["importable"], facts["error"] = True, None
    except Exception as exc:
        facts["importable"], facts["error"] = False, f"{type(exc).__name__}: {exc}".splitlines()[0]
    return facts


def _git_revision() -> str | None:
    root = Path(__file__).resolve().parents[2]
    rev = _run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"])
    if rev and _run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]):
        rev += "+dirty"
    return rev


def collect() -> dict:
    """Read this machine. Imports torch (after process_env has set the fallback variable)."""
    return {
        "facts_schema": FACTS_SCHEMA,
        "host": socket.gethostname(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable, "arch": normalize_arch(platform.machine()),
                   "bits": struct.calcsize("P") * 8},
        "os": {"system": platform.system(), "release": platform.release(),
               "machine": normalize_arch(platform.machine()), "platform": platform.platform()},
        "mac": _mac_facts(),
        "cpu": {"model": _cpu_model(), "logical": os.cpu_count(), "usable": _usable_cpus()},
        "nvidia_driver": _nvidia_driver(),
        "packages": package_versions(),
        "torch": _torch_facts(),
        "tokenizers": _tokenizers_facts(),
        "env": dict(process_env.ORIGINAL),
        "suite_revision": _git_revision(),
    }


@functools.lru_cache(maxsize=1)
def current() -> dict:
    """This process's facts, gathered once."""
    return collect()


def trainer_default_device() -> dict:
    """Which device ``transformers.TrainingArguments`` picks when none is asked for."""
    import tempfile
    try:
        from transformers import TrainingArguments
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(output_dir=out, report_to=[])
            return {"device": args.device.type, "error": None}
    except Exception as exc:
        return {"device": None, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def env_id(facts: dict) -> str:
    """Stable name of an environment: host, Python, torch. One run file per environment."""
    torch_v = facts.get("torch", {}).get("version") or "no-torch"
    raw = f"{facts.get('host', 'host')}-py{facts['python']['version']}-torch{torch_v}"
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", raw)


# --------------------------------------------------------------------------- judging

@dataclasses.dataclass(frozen=True)
class Fitness:
    """``ok``: fit. ``fail``: misconfigured, ``fix`` says what to do. ``na``: the check does
    not apply to this machine. ``limit``: a known limitation of this version or OS
    (reported, not a misconfiguration)."""
    outcome: str
    summary: str
    fix: str = ""
    metrics: dict = dataclasses.field(default_factory=dict)

    def message(self) -> str:
        return f"{self.summary}. Fix: {self.fix}" if self.fix else self.summary


def ok(summary, **metrics):
    return Fitness("ok", summary, metrics=metrics)


def fail(summary, fix, **metrics):
    return Fitness("fail", summary, fix, metrics)


def na(summary):
    return Fitness("na", summary)


def limit(summary, fix="", **metrics):
    return Fitness("limit", summary, fix, metrics)


def version_of(value: str | None) -> Version | None:
    if not value:
        return None
    try:
        return Version(value.split("+")[0])
    except InvalidVersion:
        return None


def torch_version(f: dict) -> Version | None:
    return version_of(f.get("torch", {}).get("version"))


def macos_version(f: dict) -> Version | None:
    return version_of((f.get("mac") or {}).get("version"))


def _plat(f: dict) -> str:
    return f"{f['os']['system']} {f['os']['machine']}"


# Version gates: data, each with its source. The judges read them; no number is inline.
@dataclasses.dataclass(frozen=True)
class Gate:
    what: str
    torch: str | None = None
    macos: str | None = None
    accelerate: str | None = None
    source: str = ""


GATES = {
    "mps": Gate("the MPS backend", torch="1.12", macos="12.3",
                source="PyTorch 1.12 release notes; HF perf_train_special (seed 001): macOS 12.3+"),
    "mps-torch-2.12": Gate("torch >= 2.12 on macOS", macos="14",
                           source="torch arm64 wheels are tagged macosx_14_0 from 2.12; the 2.14 binary says "
                                  "'The MPS backend is supported on macOS 14.0+'"),
    "mps-fp16-autocast": Gate("fp16 autocast on MPS", torch="2.5",
                              source="torch/amp/autocast_mode.py: mps autocast added in 2.5 (fp16 only)"),
    "mps-bf16-autocast": Gate("bf16 autocast on MPS", torch="2.6", macos="14",
                              source="torch/amp/autocast_mode.py: bf16 on mps from 2.6, needs macOS 14"),
    "mps-trainer-fp16": Gate("Trainer fp16 mixed precision on MPS", torch="2.8", accelerate="1.11",
                             source="transformers Trainer / accelerate mixed-precision checks for mps"),
}


def gate_gaps(gate: Gate, f: dict) -> list[str]:
    """What this environment lacks for a gate, as readable phrases (empty when it passes)."""
    gaps = []
    tv = torch_version(f)
    if gate.torch and (tv is None or tv < Version(gate.torch)):
        gaps.append(f"torch >= {gate.torch} (this is {tv or 'not installed'})")
    if gate.macos:
        mv = macos_version(f)
        if mv is None or mv < Version(gate.macos):
            gaps.append(f"macOS >= {gate.macos} (this is {mv or 'not macOS'})")
    if gate.accelerate:
        av = version_of(f.get("packages", {}).get("accelerate"))
        if av is None or av < Version(gate.accelerate):
            gaps.append(f"accelerate >= {gate.accelerate} (this is {av or 'not installed'})")
    return gaps


def _upgrade_hint(gaps: list[str]) -> str:
    hints = []
    for gap in gaps:
        if gap.startswith("torch"):
            hints.append(f"pip install -U 'torch>={gap.split('>= ')[1].split(' ')[0]}'")
        elif gap.startswith("accelerate"):
            hints.append(f"pip install -U 'accelerate>={gap.split('>= ')[1].split(' ')[0]}'")
        elif gap.startswith("macOS"):
            hints.append("update macOS (System Settings > General > Software Update)")
    return "; ".join(hints)


# -- MPS

def is_mac(f: dict) -> bool:
    return f["os"]["system"] == "Darwin"


def under_rosetta(f: dict) -> bool:
    return bool((f.get("mac") or {}).get("proc_translated"))


def apple_silicon(f: dict) -> bool:
    return bool((f.get("mac") or {}).get("hw_arm64"))


ARM64_PYTHON_FIX = ("install an arm64 Python (python.org universal2 installer, Homebrew under /opt/homebrew, "
                    "or `CONDA_SUBDIR=osx-arm64 conda create ...`), then reinstall torch in it")


def mps_unavailable_cause(f: dict) -> tuple[str, str] | None:
    """Why MPS is not usable here, and the fix; None when it is available.

    Order matters: the first cause found is the one a user must fix first.
    """
    t = f.get("torch", {})
    if t.get("mps_available"):
        return None
    if not is_mac(f):
        return (f"MPS unavailable: this is {_plat(f)}; MPS needs macOS on Apple silicon or on an Intel Mac "
                "with a Metal GPU", "run the mps checks on a Mac")
    if under_rosetta(f):
        return ("MPS unavailable: Python is x86_64 under Rosetta on an Apple-silicon Mac", ARM64_PYTHON_FIX)
    mv = macos_version(f)
    need = Version(GATES["mps"].macos)
    if mv is not None and mv < need:
        return (f"MPS unavailable: macOS {mv} is older than {need}", "update macOS to 12.3 or newer")
    if not t.get("importable", False):
        return (f"MPS unavailable: torch does not import ({t.get('error')})", "reinstall torch: pip install -U torch")
    tv = torch_version(f)
    if tv is not None and tv < Version(GATES["mps"].torch):
        return (f"MPS unavailable: torch {tv} predates MPS (1.12)", "pip install -U torch")
    if not t.get("mps_built"):
        return ("MPS unavailable: this torch build has no MPS backend (torch.backends.mps.is_built() is False)",
                "install the official macOS wheel from PyPI (pip install --force-reinstall torch); "
                "source builds need USE_MPS=1")
    where = "Apple silicon" if apple_silicon(f) else "this Intel Mac"
    return (f"MPS unavailable: torch.backends.mps.is_available() is False on {where} (macOS {mv}): "
            "no usable Metal device",
            "on Intel Macs MPS needs a Metal-capable AMD GPU; in a VM or over some remote sessions Metal is absent")


def _mac_only(f: dict) -> Fitness | None:
    if not is_mac(f):
        return na(f"not applicable: this is {_plat(f)}; the mps checks concern macOS")
    return None


def judge_python_arch(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    arch = f["python"]["arch"]
    if apple_silicon(f):
        if arch == "arm64":
            return ok("Python is arm64, native on Apple silicon", arch=arch)
        return fail(f"Python is {arch} on an Apple-silicon Mac (it runs under Rosetta and sees no MPS)",
                    ARM64_PYTHON_FIX, arch=arch)
    # An Intel Mac: x86_64 is its native architecture; MPS then depends on its GPU.
    if arch == "x86_64":
        return ok("Python is x86_64, native on this Intel Mac", arch=arch)
    return fail(f"Python reports {arch} on an Intel Mac", "install a native x86_64 Python", arch=arch)


def judge_not_rosetta(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    if under_rosetta(f):
        return fail("this Python runs under Rosetta 2 (sysctl.proc_translated = 1)", ARM64_PYTHON_FIX)
    return ok("not translated by Rosetta")


def judge_macos_version(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    mv, need = macos_version(f), Version(GATES["mps"].macos)
    if mv is None:
        return fail("macOS version could not be read", "check `sw_vers -productVersion`")
    if mv < need:
        return fail(f"macOS {mv} is older than {need}, the first release with MPS",
                    "update macOS (System Settings > General > Software Update) to 12.3 or newer",
                    macos=str(mv))
    tv, newer = torch_version(f), GATES["mps-torch-2.12"]
    if tv is not None and tv >= Version("2.12") and mv < Version(newer.macos):
        return fail(f"macOS {mv} with torch {tv}: torch 2.12 and newer support MPS on macOS {newer.macos}+ only",
                    f"update macOS to {newer.macos}, or stay on torch < 2.12", macos=str(mv))
    return ok(f"macOS {mv} >= {need}", macos=str(mv))


def judge_torch_for_mps(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    tv, need = torch_version(f), Version(GATES["mps"].torch)
    if tv is None:
        return fail("torch is not installed or does not import", "pip install torch")
    if tv < need:
        return fail(f"torch {tv} predates the MPS backend ({need})", "pip install -U torch")
    return ok(f"torch {tv} has the MPS backend (>= {need})", torch=str(tv))


def judge_mps_built(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    if f.get("torch", {}).get("mps_built"):
        return ok("torch.backends.mps.is_built() is True")
    return fail("this torch was built without MPS (torch.backends.mps.is_built() is False)",
                "install the official macOS arm64 wheel: pip install --force-reinstall torch")


def judge_mps_available(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    cause = mps_unavailable_cause(f)
    if cause is None:
        return ok("torch.backends.mps.is_available() is True")
    return fail(*cause)


def judge_fallback_env(f: dict) -> Fitness:
    """Only 0 and 1 mean what they say on every torch version.

    torch < 2.8 parses the value with std::stoi when the MPS library loads (a word such as
    "true" throws there); torch >= 2.8 treats every value but "0" as on, so "false" turns
    the fallback ON. Source: aten/src/ATen/mps/MPSFallback.mm across 2.0-2.14 wheels.
    """
    if (v := _mac_only(f)):
        return v
    value = f.get("env", {}).get("PYTORCH_ENABLE_MPS_FALLBACK")
    if value is None:
        return ok("PYTORCH_ENABLE_MPS_FALLBACK is not set: an op without an MPS kernel raises NotImplementedError")
    if value in ("0", "1"):
        state = "on: missing kernels run on the CPU" if value == "1" else "off"
        return ok(f"PYTORCH_ENABLE_MPS_FALLBACK={value} ({state})")
    tv = torch_version(f)
    if tv is not None and tv >= Version("2.8"):
        meaning = "torch >= 2.8 reads every value but '0' as on"
    elif value.strip().lstrip("+-").isdigit():
        meaning = f"torch < 2.8 reads it as the integer {int(value)}"
    else:
        meaning = "torch < 2.8 parses it with std::stoi, which throws on a word when torch loads"
    return fail(f"PYTORCH_ENABLE_MPS_FALLBACK={value!r} is not 0 or 1 ({meaning})",
                "export PYTORCH_ENABLE_MPS_FALLBACK=1 (or 0 for strict runs)")


WATERMARK_VARS = ("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO")
# aten/src/ATen/mps/MPSAllocator.{h,mm} (torch 2.0-2.15): high defaults to 1.7 and must lie
# in [0, 2.0] (0 lifts the limit); low defaults to 1.4 on unified memory (1.0 on a discrete
# GPU before 2.14) and must lie in [0, high] (or [0, 2.0] when high is 0). Values are read
# with strtod, so text that is not a number silently becomes 0.0: no limit at all.
WATERMARK_UPPER = 2.0
WATERMARK_DEFAULT_HIGH = 1.7


def _watermark_default_low(f: dict) -> float:
    tv = torch_version(f)
    discrete = is_mac(f) and not apple_silicon(f) and (tv is None or tv < Version("2.14"))
    return 1.0 if discrete else 1.4


def judge_watermark_env(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    env = f.get("env", {})
    raw = {name: env.get(name) for name in WATERMARK_VARS}
    if raw[WATERMARK_VARS[0]] is None and raw[WATERMARK_VARS[1]] is None:
        return ok("MPS watermark ratios not set: torch defaults apply")
    values = {}
    for name, text in raw.items():
        if text is None:
            continue
        try:
            values[name] = float(text)
        except ValueError:
            return fail(f"{name}={text!r} is not a number: torch reads it as 0.0, which removes the memory limit",
                        f"unset {name} or give a ratio such as 1.4")
    high = values.get(WATERMARK_VARS[0], WATERMARK_DEFAULT_HIGH)
    low = values.get(WATERMARK_VARS[1], _watermark_default_low(f))
    if not 0.0 <= high <= WATERMARK_UPPER:
        return fail(f"PYTORCH_MPS_HIGH_WATERMARK_RATIO={high} is outside [0, {WATERMARK_UPPER}]: torch raises "
                    "'invalid high watermark ratio'", "use a ratio between 0 (no limit) and 2.0")
    ceiling = high if high > 0 else WATERMARK_UPPER
    if not 0.0 <= low <= ceiling:
        given = "" if WATERMARK_VARS[1] in values else " (the default)"
        return fail(f"low watermark ratio {low}{given} is outside [0, {ceiling}]: torch raises "
                    "'invalid low watermark ratio'",
                    f"set PYTORCH_MPS_LOW_WATERMARK_RATIO <= {ceiling} as well, or raise the high ratio")
    note = " (0 lifts the limit: the system may run out of memory)" if high == 0 else ""
    return ok(f"MPS watermark ratios valid: high {high}, low {low}{note}")


def judge_tokenizers_native(f: dict) -> Fitness:
    tok = f.get("tokenizers", {})
    if not tok.get("installed"):
        return fail("tokenizers is not installed", "pip install tokenizers (a prebuilt wheel exists for arm64 macOS)")
    if not tok.get("importable"):
        return fail(f"tokenizers does not import: {tok.get('error')}",
                    "reinstall it for this Python: pip install --force-reinstall tokenizers")
    arch, archs = f["python"]["arch"], tok.get("binary_archs") or []
    if not archs:
        return fail("tokenizers has no native extension", "pip install --force-reinstall tokenizers")
    if arch not in archs:
        return fail(f"tokenizers' native library is built for {'/'.join(archs)}, this Python is {arch}",
                    "pip install --force-reinstall --no-cache-dir tokenizers")
    return ok(f"tokenizers imports; native library built for {'/'.join(archs)}")


def judge_trainer_device(expected: str):
    """TrainingArguments should pick the accelerator without being told (seed 001)."""
    def judge(f: dict) -> Fitness:
        if expected == "mps" and (v := _mac_only(f)):
            return v
        trainer = f.get("trainer") or {}
        got = trainer.get("device")
        if trainer.get("error"):
            return fail(f"TrainingArguments could not be built: {trainer['error']}",
                        "pip install -U transformers accelerate")
        if got == expected:
            return ok(f"TrainingArguments picks '{got}' by default", device=got)
        if expected == "mps" and (cause := mps_unavailable_cause(f)):
            return fail(f"TrainingArguments picks '{got}': {cause[0]}", cause[1])
        return fail(f"TrainingArguments picks '{got}', not '{expected}'",
                    "check use_cpu / no_cuda in your arguments, CUDA_VISIBLE_DEVICES, and `accelerate config`")
    judge.__name__ = f"judge_trainer_device_{expected}"
    return judge


def judge_gate(key: str):
    """A version gate, reported as what this environment can use."""
    gate = GATES[key]

    def judge(f: dict) -> Fitness:
        if gate.macos and (v := _mac_only(f)):
            return v
        gaps = gate_gaps(gate, f)
        if gaps:
            return limit(f"{gate.what} not usable here: needs " + " and ".join(gaps), _upgrade_hint(gaps),
                         usable=False)
        return ok(f"{gate.what} usable ({gate.source.split(':')[0]})", usable=True)
    judge.__name__ = f"judge_gate_{key}"
    return judge


# -- CUDA

def judge_cuda_present(f: dict) -> Fitness:
    t = f.get("torch", {})
    if t.get("cuda_available"):
        names = ", ".join(d["name"] for d in t.get("cuda_devices", []))
        return ok(f"CUDA available: {names}", devices=len(t.get("cuda_devices", [])))
    driver = f.get("nvidia_driver")
    if driver is None:
        return na(f"not applicable: no NVIDIA GPU on this {_plat(f)} machine")
    if not t.get("cuda_build"):
        return fail(f"an NVIDIA GPU is present (driver {driver}) but this torch is a CPU-only build",
                    "install a CUDA build of torch (pip install torch on Linux x86_64)")
    env_visible = (f.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
    if env_visible is not None and env_visible.strip() in ("", "-1"):
        return fail(f"CUDA_VISIBLE_DEVICES={env_visible!r} hides every GPU", "unset CUDA_VISIBLE_DEVICES")
    return fail(f"an NVIDIA GPU is present (driver {driver}) but torch (CUDA {t.get('cuda_build')}) cannot use it",
                "the driver is likely older than this torch's CUDA runtime: update the driver or install a torch "
                "built for an older CUDA")


def _first_cuda(f: dict) -> dict | None:
    devices = f.get("torch", {}).get("cuda_devices") or []
    return devices[0] if devices else None


def judge_cuda_capability(f: dict) -> Fitness:
    dev = _first_cuda(f)
    if dev is None:
        return na("not applicable: no usable CUDA device")
    major, minor = dev["capability"]
    arch_list = f.get("torch", {}).get("cuda_arch_list") or []
    sms = [int(a.split("_")[1]) for a in arch_list if re.fullmatch(r"(sm|compute)_\d+a?", a.rstrip("a"))]
    cap = major * 10 + minor
    if arch_list and not any(sm // 10 == major and sm <= cap for sm in sms) and not any(
            a.startswith("compute_") and int(a.split("_")[1].rstrip("a")) <= cap for a in arch_list):
        return fail(f"{dev['name']} is sm_{cap}; this torch ships kernels for {', '.join(arch_list)}",
                    "install a torch build that supports this GPU generation", capability=f"{major}.{minor}")
    return ok(f"{dev['name']}: compute capability {major}.{minor}", capability=f"{major}.{minor}")


def judge_cuda_bf16(f: dict) -> Fitness:
    dev = _first_cuda(f)
    if dev is None:
        return na("not applicable: no usable CUDA device")
    if f["torch"].get("cuda_bf16"):
        return ok(f"bf16 supported on {dev['name']}", usable=True)
    return limit(f"bf16 not supported on {dev['name']} (needs compute capability 8.0+); use fp16", usable=False)


# -- CPU

def judge_cpu_capability(f: dict) -> Fitness:
    cap = f.get("torch", {}).get("cpu_capability")
    if cap is None:
        return limit("torch does not report its CPU capability (torch.backends.cpu.get_cpu_capability missing)",
                     "pip install -U torch")
    if f["os"]["machine"] == "x86_64" and cap in ("DEFAULT", "NO AVX"):
        return limit(f"torch dispatches CPU kernels at {cap}: this CPU lacks AVX2, kernels run unvectorized",
                     capability=cap)
    return ok(f"torch dispatches CPU kernels at {cap}", capability=cap)


def judge_cpu_threads(f: dict) -> Fitness:
    threads = f.get("torch", {}).get("num_threads")
    usable = f["cpu"]["usable"]
    if not threads:
        return fail("torch reports no intra-op threads", "unset OMP_NUM_THREADS or set it to a positive number")
    if threads > usable:
        omp = (f.get("env") or {}).get("OMP_NUM_THREADS")
        return fail(f"torch uses {threads} threads on {usable} usable cores (oversubscribed"
                    f"{', OMP_NUM_THREADS=' + omp if omp else ''})",
                    f"set OMP_NUM_THREADS={usable} or torch.set_num_threads({usable})",
                    threads=threads, cores=usable)
    return ok(f"torch uses {threads} of {usable} usable cores", threads=threads, cores=usable)
