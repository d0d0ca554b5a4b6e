"""A description of this machine to paste into a bug report: ``./compat env``.

    python -m tools.envinfo            # the block, with torch's own collect_env report at its end
    python -m tools.envinfo --short    # without torch.utils.collect_env (it takes seconds)

Prints one fenced Markdown block: the chip, the GPU's cores and the memory of a Mac,
``torch.mps.recommended_max_memory()`` where MPS is available, the CUDA GPUs and driver,
the CPU, the OS, Python and the architecture it runs as (and Rosetta 2 on a Mac), the MPS
environment variables in force, the versions that decide how training behaves (torch,
transformers, accelerate, datasets, tokenizers, peft) and this checkout's revision, then
what ``torch.utils.collect_env.get_pretty_env_info()`` says.

Every part is read by a probe of harness/env/facts.py, the same ones that write a run's
header, so the block and the matrix's column headers say the same things. A probe that
fails is one line in the block saying what could not be read and why; the block is always
printed, and the exit status is 0.

A probe's commands go through ``Probes.run`` and the OS is ``Probes.system``, so the
self-tests (tests/test_envinfo.py) feed it a Mac's recorded outputs on any machine.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Any, Callable, Mapping

from harness.env import facts
from tools import cli

# The MPS variables named in every block (a user who set none still sees what exists);
# any other PYTORCH_MPS_* or PYTORCH_ENABLE_MPS_* that is set is listed after them.
NAMED_MPS_VARS = (
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "PYTORCH_MPS_LOW_WATERMARK_RATIO",
    "PYTORCH_MPS_FAST_MATH",
    "PYTORCH_MPS_PREFER_METAL",
)
MPS_VAR_PREFIXES = ("PYTORCH_MPS_", "PYTORCH_ENABLE_MPS_")
VERSIONS = ("torch", "transformers", "accelerate", "datasets", "tokenizers", "peft")
GIB = 2 ** 30
WIDTH = 22  # the labels' column


def _collect_env() -> str:
    from torch.utils import collect_env
    return collect_env.get_pretty_env_info()


def _ram_bytes() -> int | None:
    """This machine's physical memory off a Mac (POSIX sysconf), None where it cannot say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _linux_distribution() -> str | None:
    """The distribution's PRETTY_NAME from os-release, None where there is none."""
    import platform
    reader = getattr(platform, "freedesktop_os_release", None)
    try:
        return reader().get("PRETTY_NAME") if reader else None
    except OSError:
        return None


@dataclasses.dataclass
class Probes:
    """Where each part of the block comes from. The defaults read this machine; a test
    replaces ``run`` (the command runner), ``system`` (``sys.platform``) and any probe."""
    run: Callable[..., str | None] = facts.run_command
    system: str = sys.platform
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))
    torch: Callable[[], dict] = facts.torch_facts
    packages: Callable[[tuple], dict] = facts.package_versions
    nvidia_driver: Callable[[], str | None] = facts.nvidia_driver
    python: Callable[[], dict] = facts.python_facts
    os_facts: Callable[[], dict] = facts.os_facts
    usable_cpus: Callable[[], int] = facts.usable_cpus
    ram_bytes: Callable[[], int | None] = _ram_bytes
    distribution: Callable[[], str | None] = _linux_distribution
    collect_env: Callable[[], str] | None = _collect_env
    revision: Callable[[], str | None] | None = None   # None: facts.git_revision with ``run``

    def mac(self) -> dict | None:
        return facts.mac_facts(self.run, self.system)

    def cpu_model(self) -> str | None:
        return facts.cpu_model(self.run, self.system)

    def git_revision(self) -> str | None:
        return self.revision() if self.revision else facts.git_revision(self.run)


class _Failed:
    """What a probe that raised leaves behind: its line in the block."""

    def __init__(self, what: str, exc: BaseException):
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.line = f"{what}: could not be read ({type(exc).__name__}{': ' + first if first else ''})"


def _attempt(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one probe's failure is one line, never the block's end
        return _Failed(what, exc)


def _gib(n: int | None) -> str:
    if not isinstance(n, int):
        return "unknown"
    value = n / GIB
    return f"{value:.0f} GiB ({n} bytes)" if value >= 100 else f"{value:.3g} GiB ({n} bytes)"


def _row(label: str, value: str) -> str:
    return f"{label + ':':<{WIDTH}}{value}"


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


def machine_lines(p: Probes, torch_f: Any) -> list[str]:
    """Chip, GPU, memory, CPU, OS, Python: one line each (or the probe's failure). ``torch_f``:
    what ``p.torch`` returned (or its failure)."""
    lines: list[str] = []
    on_mac = p.system == "darwin"
    mac = _attempt("Mac (sysctl, system_profiler)", p.mac) if on_mac else None
    if isinstance(mac, _Failed):
        lines.append(mac.line)
        mac = None
    if on_mac and mac is not None:
        lines.append(_row("Chip", f"{mac.get('chip') or 'unknown (sysctl -n machdep.cpu.brand_string gave nothing)'}"
                                  f"{' (' + mac['model'] + ')' if mac.get('model') else ''}"))
        cores = mac.get("gpu_cores")
        lines.append(_row("GPU cores", str(cores) if cores else (
            "unknown (system_profiler SPDisplaysDataType -json names no Apple GPU core count)"
            if mac.get("hw_arm64") else "none: an Intel Mac (its GPU is a separate card)")))
        memory = mac.get("memory_bytes")
        lines.append(_row("Unified memory" if mac.get("hw_arm64") else "Memory",
                          _gib(memory) if memory else "unknown (sysctl -n hw.memsize gave nothing)"))
    elif not on_mac:
        ram = _attempt("Memory", p.ram_bytes)
        lines.append(ram.line if isinstance(ram, _Failed) else _row("Memory", _gib(ram)))

    if isinstance(torch_f, _Failed):
        lines.append(torch_f.line)
        torch_f = {}
    elif not torch_f.get("importable", True):
        lines.append(_row("torch", f"does not import ({torch_f.get('error')})"))
    if torch_f.get("importable"):
        mps = f"built {_yes(torch_f.get('mps_built'))}, available {_yes(torch_f.get('mps_available'))}"
        if torch_f.get("mps_available"):
            rec = torch_f.get("mps_recommended_max_memory")
            mps += ("; recommended max memory " + _gib(rec) if isinstance(rec, int) else
                    "; recommended max memory: not in this torch (torch.mps.recommended_max_memory)")
        lines.append(_row("MPS", mps))
        devices = torch_f.get("cuda_devices") or []
        for i, dev in enumerate(devices):
            cap = dev.get("capability") or []
            sm = f", sm_{cap[0]}{cap[1]}" if len(cap) == 2 else ""
            lines.append(_row(f"CUDA GPU {i}", f"{dev.get('name')}, {_gib(dev.get('total_memory'))}{sm}"))
        if not devices:
            build = torch_f.get("cuda_build")
            lines.append(_row("CUDA", f"none visible (torch built for CUDA {build})" if build
                              else "none (a torch built without CUDA)"))
    if p.system.startswith("linux"):
        driver = _attempt("NVIDIA driver", p.nvidia_driver)
        lines.append(driver.line if isinstance(driver, _Failed) else
                     _row("NVIDIA driver", driver or "none loaded (no /proc/driver/nvidia/version)"))

    cpu = _attempt("CPU", p.cpu_model)
    usable = _attempt("usable CPUs", p.usable_cpus)
    if isinstance(cpu, _Failed):
        lines.append(cpu.line)
    else:
        count = f" ({usable.line})" if isinstance(usable, _Failed) else f" ({usable} usable cores)"
        lines.append(_row("CPU", f"{cpu or 'unknown'}{count}"))

    os_f = _attempt("OS", p.os_facts)
    if isinstance(os_f, _Failed):
        lines.append(os_f.line)
    else:
        if on_mac:
            name = f"macOS {mac.get('version') or '(version unknown)'}" if mac else "macOS"
        else:
            distro = _attempt("distribution", p.distribution) if p.system.startswith("linux") else None
            name = distro if isinstance(distro, str) and distro else os_f.get("system")
        lines.append(_row("OS", f"{name} ({os_f.get('platform')})"))

    py = _attempt("Python", p.python)
    if isinstance(py, _Failed):
        lines.append(py.line)
    else:
        lines.append(_row("Python", f"{py.get('version')} {py.get('implementation')}, runs as {py.get('arch')}, "
                                    f"{py.get('bits')}-bit ({py.get('executable')})"))
    if on_mac and mac is not None:
        if mac.get("proc_translated"):
            rosetta = "yes: this Python is x86_64 under Rosetta 2, so MPS is unavailable; use an arm64 Python"
        elif mac.get("proc_translated") is None:
            why = (mac.get("unreadable") or {}).get("proc_translated") or "sysctl could not be read"
            rosetta = (f"cannot tell ({why}); check by hand: {(py.get('executable') if isinstance(py, dict) else None) or 'python3'} -c \"import "
                       "subprocess; subprocess.run(['/usr/sbin/sysctl', '-n', 'sysctl.proc_translated'])\" "
                       "(1: under Rosetta 2)")
        elif mac.get("hw_arm64"):
            rosetta = "no (native arm64)"
        else:
            rosetta = "no (an Intel Mac)"
        lines.append(_row("Rosetta 2", rosetta))
    return lines


def mps_variable_lines(environ: Mapping[str, str]) -> list[str]:
    """The named MPS variables ("not set" when absent), then any other PYTORCH_MPS_* /
    PYTORCH_ENABLE_MPS_* that is set."""
    lines = [f"  {name}={environ[name]}" if name in environ else f"  {name}: not set" for name in NAMED_MPS_VARS]
    others = sorted(n for n in environ if n.startswith(MPS_VAR_PREFIXES) and n not in NAMED_MPS_VARS)
    return lines + [f"  {name}={environ[name]}" for name in others]


def version_lines(p: Probes, torch_f: Any) -> list[str]:
    """Each package's installed version (torch's own ``__version__`` where it imports, which
    names its build: ``2.15.0+cu132``), then this checkout's revision."""
    lines = []
    versions = _attempt("package versions", lambda: p.packages(VERSIONS))
    if isinstance(versions, _Failed):
        lines.append("  " + versions.line)
    else:
        for name in VERSIONS:
            version = versions.get(name)
            if name == "torch" and isinstance(torch_f, dict) and torch_f.get("version"):
                version = torch_f["version"]
            lines.append(f"  {name:<14}{version or 'not installed'}")
    rev = _attempt("mps-compat revision", p.git_revision)
    lines.append("  " + rev.line if isinstance(rev, _Failed) else
                 f"  {'mps-compat':<14}{rev or 'unknown (not a git checkout, or no git)'}")
    return lines


def collect_env_lines(p: Probes) -> list[str]:
    if p.collect_env is None:
        return []
    text = _attempt("torch.utils.collect_env", p.collect_env)
    if isinstance(text, _Failed):
        return ["", text.line]
    return ["", "torch.utils.collect_env:", *str(text).rstrip().splitlines()]


def block(p: Probes | None = None) -> str:
    """The whole fenced block, ending with a newline."""
    p = p or Probes()
    torch_f = _attempt("torch", p.torch)
    body = ["mps-compat environment (./compat env)", "", *machine_lines(p, torch_f), "",
            "MPS environment variables:", *mps_variable_lines(p.environ), "",
            "Versions:", *version_lines(p, torch_f), *collect_env_lines(p)]
    text = "\n".join(body)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)  # a fence longer than any run of backticks inside
    return f"{fence}text\n{text}\n{fence}\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.envinfo",
                        description="A paste-ready description of this machine for a bug report.")
    parser.add_argument("--short", action="store_true",
                        help="leave out torch.utils.collect_env's report (it takes seconds)")
    args = parser.parse_args(argv)
    probes = Probes()
    if args.short:
        probes.collect_env = None
    cli.say(block(probes))
    return 0


if __name__ == "__main__":
    sys.exit(cli.guarded(main)())
