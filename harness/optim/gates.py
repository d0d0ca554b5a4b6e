"""When a claim applies: the claims table's gates checked against a fact set.

``applies`` says whether a claim (harness/optim/claims.py) can be checked on a target in the
environment a fact set describes, with a reason a user can act on; ``gap`` is what one
``Gate`` finds missing. The gates ask about a few packages harness/env/facts.py does not
record (``EXTRA_PACKAGES``): ``with_extra_packages`` adds them to live facts.
"""
from __future__ import annotations

from packaging.version import Version

from harness.env import facts as F, reading
from harness.optim import claims

# Packages the gates ask about that harness/env/facts.py does not record (PACKAGES).
EXTRA_PACKAGES = ("bitsandbytes", "peft", "deepspeed", "optimum")


def extra_package_versions() -> dict[str, str | None]:
    """Versions of EXTRA_PACKAGES in this environment (None: not installed)."""
    return F.package_versions(EXTRA_PACKAGES)


def with_extra_packages(facts: dict) -> dict:
    """This process's fact set plus the packages the gates ask about (a copy). Use it on live
    facts only: a recorded fact set must carry its own package versions."""
    return {**facts, "packages": {**extra_package_versions(), **(facts.get("packages") or {})}}


def cuda_capability(facts: dict) -> tuple[int, int] | None:
    """The compute capability of the fact set's first CUDA device, or None when it records none."""
    devices = (facts.get("torch") or {}).get("cuda_devices") or []
    if not devices:
        return None
    major, minor = devices[0]["capability"]
    return int(major), int(minor)


def gap(gate: claims.Gate, facts: dict) -> str | None:
    """What the fact set lacks for this gate, or None when it passes."""
    if gate.never:
        return "not applicable"
    tv = reading.torch_version(facts)
    if gate.torch:
        pv = reading.version_of((facts.get("python") or {}).get("version"))
        concerned = gate.when_python is None or (pv is not None and pv >= Version(gate.when_python))
        if concerned and (tv is None or tv < Version(gate.torch)):
            py = f" on Python {pv}" if gate.when_python else ""
            return f"this is torch {tv or 'not installed'}{py}"
    if gate.macos:
        mv = reading.macos_version(facts)
        if mv is None or mv < Version(gate.macos):
            return f"this is macOS {mv or 'not available'}"
    if gate.facts_gate:
        gaps = reading.gate_gaps(reading.GATES[gate.facts_gate], facts)
        if gaps:
            return "needs " + " and ".join(gaps)
    if gate.package:
        packages = facts.get("packages") or {}
        if gate.package not in packages:
            return (f"{gate.package} is not recorded in these facts (harness/env/facts.py PACKAGES); "
                    "pass live facts through gates.with_extra_packages()")
        pv = reading.version_of(packages[gate.package])
        if pv is None:
            return f"{gate.package} is not installed"
        if gate.package_min and pv < Version(gate.package_min):
            return f"this is {gate.package} {pv}"
    if gate.cuda_capability:
        cap = cuda_capability(facts)
        if cap is None:
            return "no CUDA device is recorded"
        if cap < tuple(int(x) for x in gate.cuda_capability.split(".")):
            return f"this GPU is compute capability {cap[0]}.{cap[1]}"
    if gate.min_cpus:
        usable = (facts.get("cpu") or {}).get("usable") or 1
        if usable < gate.min_cpus:
            return f"this machine has {usable} usable CPU core(s)"
    if gate.os:
        system = (facts.get("os") or {}).get("system")
        if system != gate.os:
            return f"this is {system}"
    return None


def applies(claim: claims.Claim | str, target: str, facts: dict, via: str = "trainer") -> tuple[bool, str]:
    """Whether a claim can be checked on ``target`` in the environment ``facts`` describes,
    with a reason a user can act on. ``via``: "trainer" (the TrainingArguments knob) or
    "torch" (the plain-PyTorch equivalent). The target's own availability (is there an MPS
    device at all) is devices.py's question, not this one."""
    claim = claims.by_name(claim) if isinstance(claim, str) else claim
    assert target in claims.TARGET_CLASSES, target
    assert via in ("trainer", "torch"), via
    for gate in claim.gates:
        if target not in gate.targets or gate.via not in ("both", via):
            continue
        missing = gap(gate, facts)
        if missing is not None:
            detail = "" if gate.never else f" ({missing})"
            return False, f"{claim.name} on {target}: {gate.reason}{detail}. Fix: {gate.fix}"
    return True, f"{claim.name} applies on {target}"
