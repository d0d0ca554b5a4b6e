"""Is this environment fit? A fact set (harness/env/facts.py, live or recorded) judged.

``Fitness`` and its constructors (ok, fail, na, limit): what a judge returns. What a judge
asks of the facts: the versions a fact set records, which platform it is (a Mac, under
Rosetta, Apple silicon), the version gates (``GATES``, data with their sources) and what a
fact set lacks for one, and why MPS is unavailable. Then the judges: each ``judge_*`` says
whether the environment is fit for one thing: the Python's architecture, Rosetta, the macOS
and torch versions for MPS, the MPS build and device, the fallback and watermark
variables, the tokenizers' native build, the Trainer's default device, the version gates,
CUDA's presence, capability and bf16, and the CPU's capability and threads.
harness/env/checks.py turns them into checks. Pure functions of a fact set: nothing here
touches the machine.
"""
from __future__ import annotations

import dataclasses
import re

from packaging.version import InvalidVersion, Version

from harness.env.facts import normalize_arch


OK, FAIL, NA, LIMIT = "ok", "fail", "na", "limit"
OUTCOMES = (OK, FAIL, NA, LIMIT)


@dataclasses.dataclass(frozen=True)
class Fitness:
    """``ok``: fit. ``fail``: misconfigured, ``fix`` says what to do. ``na``: the check does
    not apply to this machine. ``limit``: a known limitation of this version or OS
    (reported, not a misconfiguration), or a fact that could not be read, so that neither a
    pass nor a failure would be true (the summary says "cannot tell" and what was not read,
    the fix how to read it by hand). ``note``: an ``ok``'s finding worth reading, which the
    check's record carries as its reason (an ok's summary alone is not recorded)."""
    outcome: str
    summary: str
    fix: str = ""
    metrics: dict = dataclasses.field(default_factory=dict)
    note: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown fitness {self.outcome!r}; one of {', '.join(OUTCOMES)}")

    def message(self) -> str:
        return f"{self.summary}. Fix: {self.fix}" if self.fix else self.summary


def ok(summary, note="", **metrics):
    return Fitness(OK, summary, metrics=metrics, note=note)


def fail(summary, fix, **metrics):
    return Fitness(FAIL, summary, fix, metrics)


def na(summary):
    return Fitness(NA, summary)


def limit(summary, fix="", **metrics):
    return Fitness(LIMIT, summary, fix, metrics)


def version_of(value: str | None) -> Version | None:
    if not value:
        return None
    try:
        return Version(value.split("+")[0])
    except InvalidVersion:
        return None


# The one rule for comparing a recorded version with a release (every torch, macOS and package
# gate in harness/ goes through these two, never through a bare ``Version`` comparison):
# - a feature arrived in a release (``has_feature``): a pre-release, nightly, post-release or local
#   build of that release counts as the release, so 2.6.0rc1, 2.6.0.dev20250101 and 2.6.0+cpu
#   are all "2.6" for "has torch 2.6's X" (a plain comparison puts 2.6.0rc1 below 2.6);
# - a bug was fixed in a release (``has_fix``): only the release itself and what follows it
#   count; a pre-release or nightly of the fix release (2.15.0rc1, 2.15.0.dev2026...) is not
#   known to hold the fix, so it counts as not fixed; a nightly of a later release (2.16.0.dev...)
#   branched from a tree that holds it, and counts as fixed.
# An unknown or unreadable version has neither (the caller decides what unknown means).
def _parsed(version: Version | str | None) -> Version | None:
    return version if isinstance(version, Version) else version_of(version)


def has_feature(version: Version | str | None, since: str) -> bool:
    """Whether ``version`` has what arrived in release ``since``: its release numbers (a
    pre-release, nightly or local build counts as the release it leads to) reach ``since``."""
    v = _parsed(version)
    return v is not None and Version(v.base_version) >= Version(since)


def has_fix(version: Version | str | None, fixed_in: str) -> bool:
    """Whether ``version`` holds a fix first released in ``fixed_in``: the release or anything
    after it; a pre-release or nightly of ``fixed_in`` itself does not count (nor a local
    build of one: 2.15.0.dev20260901+cpu)."""
    v = _parsed(version)
    return v is not None and Version(v.public) >= Version(fixed_in)


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
    # The macOS a torch's MPS backend needs rises with torch (MPS_MACOS_FLOORS reads these). When
    # the device cannot be made (an older macOS, or no Metal device), the MPS device's constructor
    # warns with that text and torch.backends.mps.is_available() is False. The texts were read in
    # the macOS arm64 wheels of torch 2.2.0 to 2.15.0 (strings of torch/lib/libtorch_cpu.dylib):
    # 2.2-2.5 say 12.3+, 2.6-2.8 13.0+, 2.9-2.14 14.0+, 2.15 15.0+; the wheels before 2.12 are
    # tagged macosx_11_0, so pip installs them on a macOS whose MPS they then refuse.
    "mps-torch-2.6": Gate("torch >= 2.6 on macOS", torch="2.6", macos="13",
                          source="the torch 2.6.0 to 2.8.0 macOS arm64 binaries (libtorch_cpu.dylib) say 'The MPS "
                                 "backend is supported on MacOS 13.0+'; their wheels are tagged macosx_11_0"),
    "mps-torch-2.9": Gate("torch >= 2.9 on macOS", torch="2.9", macos="14",
                          source="the torch 2.9.0 to 2.11.0 macOS arm64 binaries say 'The MPS backend is supported "
                                 "on MacOS 14.0+' (pytorch#159275 removed macOS 13); their wheels are tagged "
                                 "macosx_11_0"),
    "mps-torch-2.12": Gate("torch >= 2.12 on macOS", torch="2.12", macos="14",
                           source="torch arm64 wheels are tagged macosx_14_0 from 2.12; the 2.12 to 2.14 binaries "
                                  "say 'The MPS backend is supported on macOS 14.0+'"),
    "mps-torch-2.15": Gate("torch >= 2.15 on macOS", torch="2.15", macos="15",
                           source="the torch 2.15.0 macOS arm64 binary (libtorch_cpu.dylib) says 'The MPS backend is "
                                  "supported on macOS 15.0+'; its wheel is still tagged macosx_14_0, so pip installs "
                                  "it on macOS 14, where MPS is then unavailable"),
    "mps-fp16-autocast": Gate("fp16 autocast on MPS", torch="2.5",
                              source="torch/amp/autocast_mode.py: mps autocast added in 2.5 (fp16 only)"),
    "mps-bf16-autocast": Gate("bf16 autocast on MPS", torch="2.6", macos="14",
                              source="torch/amp/autocast_mode.py: bf16 on mps from 2.6, needs macOS 14"),
    "mps-trainer-fp16": Gate("Trainer fp16 mixed precision on MPS", torch="2.8", accelerate="1.11",
                             source="transformers Trainer / accelerate mixed-precision checks for mps"),
}


MPS_MACOS_FLOORS = ("mps-torch-2.6", "mps-torch-2.9", "mps-torch-2.12", "mps-torch-2.15")


def mps_macos_floor(tv: Version | None) -> Gate | None:
    """The gate naming the macOS that torch ``tv``'s MPS backend needs beyond MPS's own 12.3
    (the newest of MPS_MACOS_FLOORS whose torch ``tv`` reaches; a nightly of a release counts as
    that release: ``has_feature``); None before torch 2.6."""
    floor = None
    for key in MPS_MACOS_FLOORS:
        if has_feature(tv, GATES[key].torch):
            floor = GATES[key]
    return floor


def _macos_too_old_for(tv: Version | None, mv: Version | None) -> Gate | None:
    """The floor gate that macOS ``mv`` misses for torch ``tv``, if any."""
    floor = mps_macos_floor(tv)
    return floor if floor is not None and mv is not None and not has_feature(mv, floor.macos) else None


def _update_macos_for(tv: Version | None) -> str:
    """The fix for a macOS older than MPS's own 12.3: the macOS this torch's MPS needs, which
    its floor (``mps_macos_floor``) may raise above 12.3; no torch runs MPS there."""
    floor = mps_macos_floor(tv)
    if floor is None:
        return f"update macOS to {GATES['mps'].macos} or newer (System Settings > General > Software Update)"
    return (f"update macOS to {floor.macos} or newer (System Settings > General > Software Update): MPS needs "
            f"{GATES['mps'].macos}, and torch {tv}'s MPS backend {floor.macos}")


# Below each MPS floor's torch, the newest torch PyPI has and the newest CPython its macOS arm64
# wheels are built for: an older torch is a way out only on a Python it has a wheel for. Read in
# PyPI's torch release files (https://pypi.org/pypi/torch/json, 2026-12-07): 2.5.1 cp39-cp312
# (no cp313 macOS wheel), 2.8.0 cp39-cp313, 2.11.0 cp310-cp314, 2.14.1 cp310-cp314.
OLDER_TORCH_PYTHON = {"2.6": ("2.5.1", "3.12"), "2.9": ("2.8.0", "3.13"), "2.12": ("2.11.0", "3.14"),
                      "2.15": ("2.14.1", "3.14")}
# transformers 5.20.0 is the first to need torch 2.6: its METADATA says Requires-Dist torch>=2.6 (5.19.0:
# torch>=2.5), and with an older torch its import_utils disables torch ("Disabling PyTorch because
# PyTorch >= 2.6 is required"); read in the two wheels from PyPI. So a torch below 2.6 needs one below it.
TRANSFORMERS_NEEDING = {"2.6": "5.20"}


def _older_torch_or_newer_macos(floor: Gate, mv: Version, f: dict | None = None) -> str:
    """The two ways out: the macOS ``floor`` needs, or the torch below the first floor that macOS
    ``mv`` misses (torch 2.12 on macOS 13: below 2.9, not 2.12, whose 2.11 needs macOS 14 too),
    with what that torch needs beside it in the fact set ``f``: a transformers that still takes it
    (below 5.20 for a torch below 2.6), and a Python it has a wheel for (none below 2.9 for Python
    3.14: there the way is a Python 3.13 and a new environment)."""
    first = next(GATES[k] for k in MPS_MACOS_FLOORS if not has_feature(mv, GATES[k].macos))
    update = f"update macOS to {floor.macos} (System Settings > General > Software Update)"
    reqs = [f"'torch<{first.torch}'"]
    tf_floor = TRANSFORMERS_NEEDING.get(first.torch)
    tf = version_of(((f or {}).get("packages") or {}).get("transformers"))
    if tf_floor and (tf is None or has_feature(tf, tf_floor)):
        reqs.append(f"'transformers<{tf_floor}'")
    install = "pip install " + " ".join(reqs) + (
        f" (transformers {tf_floor} and later need torch {first.torch})" if len(reqs) > 1 else "")
    last, newest_py = OLDER_TORCH_PYTHON.get(first.torch, (None, None))
    py = version_of(((f or {}).get("python") or {}).get("version"))
    if newest_py and py is not None and Version(f"{py.major}.{py.minor}") > Version(newest_py):
        return (f"{update}, or stay on a torch older than {first.torch}, which has no wheel for Python "
                f"{py.major}.{py.minor} (the newest, {last}, is built for Python {newest_py} and older): make the "
                f"environment again from Python {newest_py} (./compat: PYTHON=python{newest_py} ./compat setup "
                f"makes .venv anew; elsewhere python{newest_py} -m venv), then {install}")
    return f"{update}, or stay on a torch older than {first.torch}: {install}"


def gate_gaps(gate: Gate, f: dict) -> list[str]:
    """What this environment lacks for a gate, as readable phrases (empty when it passes). A gate
    names a feature's first release: a pre-release or nightly of it passes (``has_feature``)."""
    gaps = []
    tv = torch_version(f)
    if gate.torch and not has_feature(tv, gate.torch):
        gaps.append(f"torch >= {gate.torch} (this is {tv or 'not installed'})")
    if gate.macos:
        mv = macos_version(f)
        if not has_feature(mv, gate.macos):
            gaps.append(f"macOS >= {gate.macos} (this is {mv or 'not macOS'})")
    if gate.accelerate:
        av = version_of(f.get("packages", {}).get("accelerate"))
        if not has_feature(av, gate.accelerate):
            gaps.append(f"accelerate >= {gate.accelerate} (this is {av or 'not installed'})")
    return gaps


# PyPI stopped building torch for Intel Macs after 2.2.2 (pytorch/pytorch#114602, the 2.2.0
# release notes): pip on an Intel Mac, or under Rosetta, finds no newer wheel.
LAST_INTEL_MAC_TORCH = "2.2.2"


@dataclasses.dataclass(frozen=True)
class TorchWheels:
    """Where a torch series' PyPI wheels install: the CPython versions they are built for, and the
    macOS arm64 they are tagged for (``macos_by_python``: a Python whose wheel asks a newer one)."""
    series: str
    python: tuple[str, str]     # oldest and newest CPython with a wheel
    macos: str                  # the macOS arm64 its wheels are tagged for
    macos_by_python: tuple[tuple[str, str], ...] = ()
    source: str = ""


# The torch series tox.ini runs the suites on. Read in PyPI's torch release files
# (https://pypi.org/pypi/torch/json, 2026-12-07; 2.15.0's also in uv.lock): every series has
# manylinux_2_28 x86_64 and aarch64 wheels (2.6: manylinux1 x86_64) for the Pythons listed.
TORCH_WHEELS = {
    "2.6": TorchWheels("2.6", ("3.9", "3.13"), "11", source="torch 2.6.0: cp39-cp313, macosx_11_0_arm64"),
    "2.8": TorchWheels("2.8", ("3.9", "3.13"), "11", source="torch 2.8.0: cp39-cp313, macosx_11_0_arm64"),
    "2.10": TorchWheels("2.10", ("3.10", "3.14"), "11", (("3.14", "14"),),
                        source="torch 2.10.0: cp310-cp314, macosx_11_0_arm64 (cp314: macosx_14_0_arm64)"),
    "2.15": TorchWheels("2.15", ("3.11", "3.15"), "14",
                        source="torch 2.15.0: cp311-cp315, macosx_14_0_arm64 only"),
}


def torch_wheel_gap(series: str, python: str, system: str, machine: str | None, macos: str | None) -> str | None:
    """Why no PyPI wheel of torch ``series`` installs on this Python (``python``: 3.10.14),
    system (``platform.system()``), machine and macOS, in words; None where one does (or where
    the series is not in TORCH_WHEELS: uv is left to say)."""
    wheels = TORCH_WHEELS.get(series)
    pv = version_of(python)
    if wheels is None or pv is None:
        return None
    py = Version(f"{pv.major}.{pv.minor}")
    low, high = wheels.python
    if not Version(low) <= py <= Version(high):
        return (f"torch {series} has no wheel for Python {py} (its wheels are built for CPython {low} to {high})")
    if system == "Darwin":
        if normalize_arch(machine) != "arm64":
            return (f"PyPI has no torch {series} for Intel Macs (its last Intel-Mac torch is {LAST_INTEL_MAC_TORCH})")
        need = dict(wheels.macos_by_python).get(str(py), wheels.macos)
        mv = version_of(macos)
        if mv is not None and not has_feature(mv, need):
            which = f" for Python {py}" if need != wheels.macos else ""
            return f"torch {series}'s macOS wheels{which} need macOS {need}+ (this is {mv})"
    return None


def upgrade_hint(gaps: list[str], f: dict | None = None) -> str:
    """The commands that close ``gate_gaps``'s gaps (pip upgrades, a macOS update), joined by \"; \".
    On an Intel Mac (``f``), whose newest PyPI torch is LAST_INTEL_MAC_TORCH, a newer torch is
    a source build, not a pip upgrade."""
    hints = []
    for gap in gaps:
        if gap.startswith("torch"):
            need = gap.split('>= ')[1].split(' ')[0]
            if f is not None and is_mac(f) and not apple_silicon(f):
                hints.append(f"PyPI has no torch >= {need} for Intel Macs (its last is {LAST_INTEL_MAC_TORCH}, so "
                             f"`pip install -U torch` finds nothing newer): build torch {need} or newer from source, "
                             "or use an Apple-silicon Mac")
            else:
                hints.append(f"pip install -U 'torch>={need}'")
        elif gap.startswith("accelerate"):
            hints.append(f"pip install -U 'accelerate>={gap.split('>= ')[1].split(' ')[0]}'")
        elif gap.startswith("macOS"):
            hints.append("update macOS (System Settings > General > Software Update)")
    return "; ".join(hints)


# -- MPS

def is_mac(f: dict) -> bool:
    return f["os"]["system"] == "Darwin"


def _arm64_python(f: dict) -> bool:
    return is_mac(f) and (f.get("python") or {}).get("arch") == "arm64"


def chip_is_apple_silicon(f: dict) -> bool | None:
    """True on Apple silicon, False on an Intel Mac, None where the facts cannot tell (sysctl could
    not be read: ``mac.unreadable`` says why). An arm64 Python is proof of Apple silicon (it runs
    on nothing else), and so is Rosetta, whatever ``hw.optional.arm64`` read."""
    mac = f.get("mac") or {}
    if mac.get("hw_arm64") or _arm64_python(f) or mac.get("proc_translated"):
        return True
    return False if mac.get("hw_arm64") is False else None


def rosetta_state(f: dict) -> bool | None:
    """True under Rosetta 2, False natively (an arm64 Python, or an Intel Mac, which has no
    Rosetta), None where the facts cannot tell."""
    if _arm64_python(f):
        return False
    translated = (f.get("mac") or {}).get("proc_translated")
    if isinstance(translated, bool):
        return translated
    return False if chip_is_apple_silicon(f) is False else None


def under_rosetta(f: dict) -> bool:
    return rosetta_state(f) is True


def apple_silicon(f: dict) -> bool:
    return chip_is_apple_silicon(f) is True


def unread_reason(f: dict, key: str) -> str:
    """Why the Mac fact ``key`` (``proc_translated``, ``hw_arm64``) could not be read, as recorded."""
    reason = ((f.get("mac") or {}).get("unreadable") or {}).get(key)
    return reason if isinstance(reason, str) and reason else "it was not recorded"


def _python_cmd(f: dict) -> str:
    exe = (f.get("python") or {}).get("executable")
    return exe if isinstance(exe, str) and exe and " " not in exe else "python3"


def check_rosetta_by_hand(f: dict) -> str:
    """How to read, by hand, what sysctl could not tell this run: ``sysctl.proc_translated`` as
    this Python sees it (the key describes the process that asks, so a shell of another
    architecture would answer for itself), and ``hw.optional.arm64``, the same for every process."""
    return (f"check by hand: `{_python_cmd(f)} -c \"import subprocess; subprocess.run(['/usr/sbin/sysctl', '-n', "
            "'sysctl.proc_translated'])\"` (this Python asking `sysctl -n sysctl.proc_translated`) prints 1 under "
            "Rosetta 2, 0 when native, and fails on an Intel Mac; `/usr/sbin/sysctl -n hw.optional.arm64` prints 1 "
            f"on Apple silicon. Under Rosetta: {ARM64_PYTHON_FIX}")


ARM64_PYTHON_FIX = ("install an arm64 Python (python.org universal2 installer, Homebrew under /opt/homebrew, "
                    "or `CONDA_SUBDIR=osx-arm64 conda create ...`), then reinstall torch in it")


TORCH_REINSTALL = "-m pip install --force-reinstall --no-cache-dir torch"   # after this Python's own command
_WRONG_ARCH = re.compile(r"have \(?'?(\w+)'?\)?,\s*need \(?'?(\w+)'?\)?")


def torch_import_problem(error: str | None, f: dict) -> tuple[str, str]:
    """Why torch does not import, in the user's terms, and the fix. ``pip install -U torch`` does
    nothing for a torch that is already the newest: a wheel built for another architecture (dlopen:
    "mach-o file, but is an incompatible architecture (have 'x86_64', need 'arm64')", an Intel pip
    or a copied environment) or a damaged one is replaced only by a forced reinstall that bypasses
    pip's cache, which may hold the wrong wheel."""
    error, py = error or "no error recorded", _python_cmd(f)
    reinstall = f"{py} {TORCH_REINSTALL}"
    if re.search(r"No module named '?torch'?$", error):
        return "torch is not installed for this Python", f"{py} -m pip install torch"
    check = f"`{py} -c \"import platform; print(platform.machine())\"` prints this Python's architecture"
    if "incompatible architecture" in error or _WRONG_ARCH.search(error):
        m = _WRONG_ARCH.search(error)
        have, need = (_dlopen_arch(m.group(1)), _dlopen_arch(m.group(2))) if m else (None, None)
        if have and need:
            what = (f"torch's native library is built for {have} and this Python is {need}: {_a(have)} wheel was "
                    f"installed under {_a(need)} Python")
        else:
            what = ("torch's native library is built for another architecture than this Python's: an x86_64 "
                    "wheel under an arm64 Python, or an arm64 wheel under an x86_64 one")
        fix = (f"reinstall torch with this Python's own pip, bypassing its cache: {reinstall} (`pip install -U "
               f"torch` does nothing when the wrong build is already the newest); {check}")
        if need == "x86_64" or (need is None and (f.get("python") or {}).get("arch") == "x86_64"):
            fix += (f"; on Apple silicon an x86_64 Python runs under Rosetta and has no MPS (and PyPI's last "
                    f"Intel-Mac torch is {LAST_INTEL_MAC_TORCH}): {ARM64_PYTHON_FIX}")
        return f"torch does not import ({error}): {what}", fix
    return (f"torch does not import ({error})",
            f"reinstall torch for this Python, bypassing pip's cache: {reinstall}")


def _dlopen_arch(name: str | None) -> str | None:
    """dlopen's and platform's architecture names as this module says them (arm64e is arm64)."""
    if not name:
        return None
    name = name.lower()
    return {"arm64e": "arm64", "aarch64": "arm64", "amd64": "x86_64", "x86_64h": "x86_64"}.get(name, name)


def _a(arch: str) -> str:
    """``arch`` with its article, as it is read aloud: "an x86_64", "an arm64"."""
    return f"{'an' if arch[0] in 'aeiox' else 'a'} {arch}"


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
    if mv is not None and not has_feature(mv, GATES["mps"].macos):
        return (f"MPS unavailable: macOS {mv} is older than {need}", _update_macos_for(torch_version(f)))
    if not t.get("importable", False):
        said, fix = torch_import_problem(t.get("error"), f)
        return (f"MPS unavailable: {said}", fix)
    tv = torch_version(f)
    if tv is not None and not has_feature(tv, GATES["mps"].torch):
        return (f"MPS unavailable: torch {tv} predates MPS (1.12)", "pip install -U torch")
    if not t.get("mps_built"):
        return ("MPS unavailable: this torch build has no MPS backend (torch.backends.mps.is_built() is False)",
                "install the official macOS wheel from PyPI (pip install --force-reinstall torch); "
                "source builds need USE_MPS=1")
    if (floor := _macos_too_old_for(tv, mv)) is not None:
        return (f"MPS unavailable: torch {tv} supports MPS on macOS {floor.macos}+ only, and this is macOS {mv}",
                _older_torch_or_newer_macos(floor, mv, f))
    silicon = chip_is_apple_silicon(f)
    if rosetta_state(f) is None:   # the first cause cannot be ruled out: say so, not "no Metal device"
        arch = (f.get("python") or {}).get("arch")
        return (f"MPS unavailable: torch.backends.mps.is_available() is False (macOS {mv}), and whether this {arch} "
                f"Python runs under Rosetta 2, which hides MPS, cannot be told: sysctl.proc_translated could not be "
                f"read ({unread_reason(f, 'proc_translated')})",
                check_rosetta_by_hand(f) + "; on an Intel Mac MPS needs a Metal-capable GPU")
    where = "Apple silicon" if silicon else "this Intel Mac" if silicon is False else "this Mac"
    intel = ("on Intel Macs MPS needs a Metal-capable GPU, and from torch 2.13 one with unified memory "
             "(torch 2.13's binary: 'MPS backend is only supported on devices with unified memory', so an AMD "
             f"GPU is refused: torch 2.12 or older, built from source, since PyPI's last Intel-Mac wheel is "
             f"{LAST_INTEL_MAC_TORCH}); ")
    return (f"MPS unavailable: torch.backends.mps.is_available() is False on {where} (macOS {mv}): "
            "no usable Metal device",
            (intel if not apple_silicon(f) and has_feature(tv, "2.13") else
             "on Intel Macs MPS needs a Metal-capable AMD GPU; ") + "in a VM or over some remote sessions Metal is absent")


# --------------------------------------------------------------------------- the judges


def _mac_only(f: dict) -> Fitness | None:
    if not is_mac(f):
        return na(f"not applicable: this is {platform_of(f)}; the mps checks concern macOS")
    return None


def judge_python_arch(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    arch = f["python"]["arch"]
    silicon = chip_is_apple_silicon(f)
    if silicon:
        if arch == "arm64":
            return ok("Python is arm64, native on Apple silicon", arch=arch)
        return fail(f"Python is {arch} on an Apple-silicon Mac (it runs under Rosetta and sees no MPS)",
                    ARM64_PYTHON_FIX, arch=arch)
    if silicon is None:   # never a verdict built on a read that failed
        return limit(f"cannot tell whether this {arch} Python is native: whether this Mac is Apple silicon (where "
                     f"{arch} runs under Rosetta 2 and sees no MPS) or Intel (where it is native) could not be read: "
                     f"hw.optional.arm64 ({unread_reason(f, 'hw_arm64')})",
                     check_rosetta_by_hand(f), arch=arch, unread="hw.optional.arm64")
    # An Intel Mac: x86_64 is its native architecture; MPS then depends on its GPU.
    if arch == "x86_64":
        return ok("Python is x86_64, native on this Intel Mac", arch=arch)
    return fail(f"Python reports {arch} on an Intel Mac", "install a native x86_64 Python", arch=arch)


def judge_not_rosetta(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    state = rosetta_state(f)
    if state:
        return fail("this Python runs under Rosetta 2 (sysctl.proc_translated = 1)", ARM64_PYTHON_FIX)
    if state is None:
        return limit(f"cannot tell whether this {f['python']['arch']} Python runs under Rosetta 2: "
                     f"sysctl.proc_translated could not be read ({unread_reason(f, 'proc_translated')})",
                     check_rosetta_by_hand(f), unread="sysctl.proc_translated")
    if (f.get("mac") or {}).get("proc_translated") is None:
        return ok("not translated by Rosetta (sysctl.proc_translated was not read: " +
                  ("an arm64 Python is native" if _arm64_python(f) else "an Intel Mac has no Rosetta") + ")")
    return ok("not translated by Rosetta")


def judge_macos_version(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    mv, need = macos_version(f), Version(GATES["mps"].macos)
    if mv is None:
        return fail("macOS version could not be read", "check `sw_vers -productVersion`")
    if not has_feature(mv, GATES["mps"].macos):
        return fail(f"macOS {mv} is older than {need}, the first release with MPS",
                    _update_macos_for(torch_version(f)), macos=str(mv))
    tv = torch_version(f)
    if (floor := _macos_too_old_for(tv, mv)) is not None:
        if (f.get("torch") or {}).get("mps_available"):
            # what torch observed outranks the table, which was read in the release wheels: a nightly or
            # source build (counted as its release) may still run MPS on an older macOS
            said = (f"macOS {mv} runs MPS with this torch {tv} (torch.backends.mps.is_available() is True), although "
                    f"the table read in the release wheels expects torch {floor.torch} and newer to need macOS "
                    f"{floor.macos}+: this build (a nightly or a source build, counted as its release) still runs MPS "
                    "here")
            return ok(said, note=said, macos=str(mv), macos_needed=floor.macos, source=floor.source,
                      floor_contradicted=True)
        return fail(f"macOS {mv} with torch {tv}: torch {floor.torch} and newer support MPS on macOS "
                    f"{floor.macos}+ only: MPS is unavailable here", _older_torch_or_newer_macos(floor, mv, f),
                    macos=str(mv), macos_needed=floor.macos, source=floor.source)
    return ok(f"macOS {mv} >= {need}", macos=str(mv))


def judge_torch_for_mps(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    tv, need = torch_version(f), Version(GATES["mps"].torch)
    t = f.get("torch") or {}
    if t.get("importable") is False:
        return fail(*torch_import_problem(t.get("error"), f))
    if tv is None:
        return fail("torch is not installed or does not import", "pip install torch")
    if not has_feature(tv, GATES["mps"].torch):
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
    if has_feature(tv, "2.8"):
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
# GPU, which torch 2.13 and later refuse: "only supported on devices with unified memory") and
# must lie in [0, high] (or [0, 2.0] when high is 0). Values are read
# with strtod, so text that is not a number silently becomes 0.0: no limit at all.
WATERMARK_UPPER = 2.0
WATERMARK_DEFAULT_HIGH = 1.7


def _watermark_default_low(f: dict) -> float:
    tv = torch_version(f)
    discrete = is_mac(f) and not apple_silicon(f) and not has_feature(tv, "2.13")
    return 1.0 if discrete else 1.4


def judge_watermark_env(f: dict) -> Fitness:
    if (v := _mac_only(f)):
        return v
    env = f.get("env", {})
    raw = {name: env.get(name) for name in WATERMARK_VARS}
    if raw[WATERMARK_VARS[0]] is None and raw[WATERMARK_VARS[1]] is None:
        return ok("MPS watermark ratios not set: torch defaults apply")
    values, read_as = {}, []
    for name, text in raw.items():
        if text is None:
            continue
        number = _strtod(text)
        if number is None:
            return fail(f"{name}={text!r} is not a number: torch reads it as 0.0, which removes the memory limit",
                        f"unset {name} or give a ratio such as 1.4")
        values[name] = number
        if _STRTOD.match(text).group(0).strip() != text.strip():
            read_as.append(f"{name}={text!r} is read as {number:g}, its leading number (torch ignores the rest)")
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
    note += "".join(f"; {line}" for line in read_as)
    return ok(f"MPS watermark ratios valid: high {high:g}, low {low:g}{note}")


# What C's strtod takes from the front of a string, as torch reads the watermark ratios
# (MPSAllocator.mm: strtod(..., nullptr), the rest ignored; no number at all is 0.0).
_STRTOD = re.compile(r"\s*[+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?"
                     r"|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)


def _strtod(text: str) -> float | None:
    """The number strtod reads at the front of ``text``, or None where it reads none (0.0 in C)."""
    m = _STRTOD.match(text)
    if m is None:
        return None
    word = m.group(0).strip()
    if word.lower().lstrip("+-").startswith("0x"):
        return float.fromhex(word)
    return float(word)


# Variables that change which kernels MPS runs, and so its numbers and its times (PyTorch's
# "MPS Environment Variables" page). Each is read once per process, when torch first needs it.
# - PYTORCH_MPS_FAST_MATH: the Metal kernels torch compiles from source at run time are built
#   with fast math (Metal's relaxed precision: the Metal Shading Language specification, 1.6.3).
#   Newer torch reads any value but "0" as on (OperationUtils.mm, c10::utils::get_env); older
#   releases parse an integer there (std::stoi), which throws on a word.
# - PYTORCH_MPS_PREFER_METAL: matmuls run on torch's own Metal kernel instead of MPSGraph's.
#   torch reads only whether the variable is set (LinearAlgebra.mm, use_metal_mm: getenv !=
#   nullptr, later c10::utils::has_env), so "0" turns it on as well.
# Each from the first torch whose macOS arm64 binary (libtorch_cpu.dylib) names it: PREFER_METAL
# from 2.3, FAST_MATH from 2.5; an older torch ignores the variable, and nothing is switched.
FAST_MATH_VAR, PREFER_METAL_VAR = "PYTORCH_MPS_FAST_MATH", "PYTORCH_MPS_PREFER_METAL"
KERNEL_VARS = (FAST_MATH_VAR, PREFER_METAL_VAR)
KERNEL_VAR_SINCE = {FAST_MATH_VAR: "2.5", PREFER_METAL_VAR: "2.3"}


def _reads(var: str, torch_version: str | None) -> bool:
    """Whether torch ``torch_version`` reads the kernel switch ``var`` (unknown version: yes)."""
    tv = version_of(torch_version)
    return tv is None or has_feature(tv, KERNEL_VAR_SINCE[var])


def kernel_switches(env: dict | None, torch_version: str | None = None) -> list[str]:
    """The MPS kernel switches a process environment turns on, as "NAME=value" (none: []),
    for torch ``torch_version`` (a switch it does not read turns nothing on)."""
    env = env if isinstance(env, dict) else {}
    fast, metal = env.get(FAST_MATH_VAR), env.get(PREFER_METAL_VAR)
    on = [f"{FAST_MATH_VAR}={fast}"] if isinstance(fast, str) and fast != "0" and _reads(FAST_MATH_VAR, torch_version) else []
    return on + ([f"{PREFER_METAL_VAR}={metal}"] if isinstance(metal, str) and _reads(PREFER_METAL_VAR, torch_version)
                 else [])


KERNEL_SWITCH_EFFECT = {
    FAST_MATH_VAR: "Metal kernels compiled with fast math, which trades precision for speed",
    PREFER_METAL_VAR: "matmuls on torch's own Metal kernel instead of MPSGraph's",
}


def switch_words(switches: list[str]) -> str:
    """What the switches ``kernel_switches`` found do, in the user's words."""
    return "; ".join(f"{s}: {KERNEL_SWITCH_EFFECT[s.split('=')[0]]}" for s in switches)


def judge_kernel_env(f: dict) -> Fitness:
    """Fit when the kernel switches are unset, or set to what they say; either way the summary
    names what this run's mps numbers and times are of."""
    if (v := _mac_only(f)):
        return v
    env = f.get("env") or {}
    tv = (f.get("torch") or {}).get("version")
    unread = [v for v in KERNEL_VARS if env.get(v) is not None and not _reads(v, tv)]
    if unread:   # set, but this torch predates the switch: torch's own kernels run
        env = {k: v for k, v in env.items() if k not in unread}
    fast, metal = env.get(FAST_MATH_VAR), env.get(PREFER_METAL_VAR)
    ignored = "".join(f"; {v} is set but torch {tv} does not read it (from torch {KERNEL_VAR_SINCE[v]}): it switches "
                      "nothing" for v in unread)
    if metal is not None and metal != "1":
        return fail(f"{PREFER_METAL_VAR}={metal!r} turns torch's own Metal matmul ON: torch reads only whether the "
                    "variable is set, not its value",
                    f"unset {PREFER_METAL_VAR} to keep MPSGraph's matmul (set it, to 1, only to choose the Metal "
                    "kernel)")
    if fast not in (None, "0", "1"):
        return fail(f"{FAST_MATH_VAR}={fast!r} is not 0 or 1: newer torch reads every value but '0' as on, older "
                    "releases parse an integer and fail on a word",
                    f"export {FAST_MATH_VAR}=0 or unset it (1 turns fast math on)")
    on = kernel_switches(env, tv)
    if not on:
        return ok(f"MPS kernels as torch ships them ({FAST_MATH_VAR} and {PREFER_METAL_VAR} not set, or 0 for fast "
                  f"math){ignored}")
    return ok(f"{switch_words(on)}. This run's mps numbers and times are of those kernels, not of torch's "
              f"defaults{ignored}")


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
        if key.startswith("mps") and (cause := mps_unavailable_cause(f)) is not None:
            # no feature of MPS is usable without the device, whatever the versions say
            return limit(f"{gate.what} not usable here: {cause[0]} (see env/device-available)", cause[1],
                         usable=False)
        gaps = gate_gaps(gate, f)
        if gaps:
            return limit(f"{gate.what} not usable here: needs " + " and ".join(gaps), upgrade_hint(gaps, f),
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
        return na(f"not applicable: no NVIDIA GPU on this {platform_of(f)} machine")
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
    # sm_90a (arch-specific) and sm_120f (family, CUDA 12.9) name the same generation as sm_90 / sm_120
    parsed = [m.groups() for m in (re.fullmatch(r"(sm|compute)_(\d+)[af]?", a) for a in arch_list) if m]
    sms = [int(n) for _, n in parsed]
    cap = major * 10 + minor
    if arch_list and not any(sm // 10 == major and sm <= cap for sm in sms) and not any(
            kind == "compute" and int(n) <= cap for kind, n in parsed):
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
