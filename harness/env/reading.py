"""Reading a fact set (harness/env/facts.py): what a judge returns, and what it asks of the facts.

``Fitness`` and its constructors (ok, fail, na, limit), the versions a fact set records,
which platform it is (a Mac, under Rosetta, Apple silicon), the version gates (``GATES``,
data with their sources) and what a fact set lacks for one, and why MPS is unavailable.
Pure functions of a fact set: nothing here touches the machine.
"""
from __future__ import annotations

import dataclasses

from packaging.version import InvalidVersion, Version


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


def platform_of(f: dict) -> str:
    """The fact set's system and machine, as \"Linux x86_64\"."""
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


def upgrade_hint(gaps: list[str]) -> str:
    """The commands that close ``gate_gaps``'s gaps (pip upgrades, a macOS update), joined by \"; \"."""
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
        return (f"MPS unavailable: this is {platform_of(f)}; MPS needs macOS on Apple silicon or on an Intel Mac "
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
