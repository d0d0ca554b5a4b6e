"""The environment checks as a table: which judge answers which question, per target.

One generic test (``suites/env``) runs every row. A row names its subject (the check id),
the targets it concerns, the judge from ``harness.env.fitness``, and optionally a live probe
that must agree with the judge where the target is present. ``judge`` gives the row's
Verdict on a target.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from harness.core.records import Category, Status, Verdict
from harness.env import devices, facts, fitness
from harness.env.fitness import Fitness


@dataclasses.dataclass(frozen=True)
class EnvCheck:
    subject: str
    targets: tuple[str, ...]
    question: str
    judge: Callable[[dict], Fitness] | None = None
    gate: str | None = None          # a key of fitness.GATES: the judge is that version gate
    autocast: str | None = None      # "float16" / "bfloat16": confirm the verdict by running autocast
    needs_trainer: bool = False      # the judge reads which device TrainingArguments picks
    variant: str = ""

    def fitness_of(self, f: dict) -> Fitness:
        if self.gate:
            return fitness.judge_gate(self.gate)(f)
        if self.judge:
            return self.judge(f)
        return fitness.ok("no version gate")

    @property
    def id(self) -> str:
        return self.subject


ALL = devices.TARGETS

CHECKS: tuple[EnvCheck, ...] = (
    EnvCheck("python-arch", ("mps",), "Is Python native to this Mac (arm64 on Apple silicon)?", fitness.judge_python_arch),
    EnvCheck("not-rosetta", ("mps",), "Does Python run outside Rosetta 2?", fitness.judge_not_rosetta),
    EnvCheck("macos-version", ("mps",), "Is macOS new enough for MPS with this torch (12.3; 13 from torch 2.6, 14 from 2.9, 15 from 2.15)?", fitness.judge_macos_version),
    EnvCheck("torch-version", ("mps",), "Is torch new enough for MPS?", fitness.judge_torch_for_mps),
    EnvCheck("backend-built", ("mps",), "Was torch built with MPS?", fitness.judge_mps_built),
    EnvCheck("device-available", ("mps",), "Is the MPS device available, and if not, why?", fitness.judge_mps_available),
    EnvCheck("device-available", ("cuda",), "Is a CUDA device present and usable?", fitness.judge_cuda_present),
    EnvCheck("fallback-env", ("mps",), "Is PYTORCH_ENABLE_MPS_FALLBACK valid if set?", fitness.judge_fallback_env),
    EnvCheck("watermark-env", ("mps",), "Are the MPS watermark ratios valid if set?", fitness.judge_watermark_env),
    EnvCheck("kernel-env", ("mps",), "Do the MPS kernel switches (fast math, Metal matmul) mean what they say, if set?",
             fitness.judge_kernel_env),
    EnvCheck("tokenizers-native", ALL, "Does tokenizers import as a native build?", fitness.judge_tokenizers_native),
    EnvCheck("trainer-default-device", ("mps",), "Does TrainingArguments pick mps by default?",
             fitness.judge_trainer_device("mps"), needs_trainer=True),
    EnvCheck("trainer-default-device", ("cuda",), "Does TrainingArguments pick cuda by default?",
             fitness.judge_trainer_device("cuda"), needs_trainer=True),
    EnvCheck("fp16-autocast", ("mps",), "Can this setup use fp16 autocast on MPS?", gate="mps-fp16-autocast",
             autocast="float16"),
    EnvCheck("bf16-autocast", ("mps",), "Can this setup use bf16 autocast on MPS?", gate="mps-bf16-autocast",
             autocast="bfloat16"),
    EnvCheck("trainer-fp16", ("mps",), "Can the Trainer use fp16 mixed precision on MPS?", gate="mps-trainer-fp16"),
    EnvCheck("capability", ("cuda",), "Does this torch have kernels for the GPU?", fitness.judge_cuda_capability),
    EnvCheck("bf16-support", ("cuda",), "Does the GPU support bf16?", fitness.judge_cuda_bf16),
    EnvCheck("capability", ("cpu",), "Which vector ISA do torch's CPU kernels use?", fitness.judge_cpu_capability),
    EnvCheck("threads", ("cpu",), "Is the intra-op thread count sane for the cores?", fitness.judge_cpu_threads),
    EnvCheck("fp16-autocast", ("cpu", "cuda"), "Does fp16 autocast run here?", autocast="float16"),
    EnvCheck("bf16-autocast", ("cpu", "cuda"), "Does bf16 autocast run here?", autocast="bfloat16"),
)


def cases() -> list[EnvCheck]:
    """CHECKS with each registered emulating stand-in (devices.StandIn.emulates) among the
    targets of the rows of the device it emulates: the emulated Mac gets the mps rows,
    judged on its recorded Mac's facts (``judge`` with devices.facts_for)."""
    emulating = [(name, devices.rules_of(name)) for name in devices.STAND_INS if devices.is_emulated(name)]
    return [dataclasses.replace(c, targets=c.targets + tuple(n for n, rules in emulating if rules in c.targets))
            if emulating else c for c in CHECKS]


@functools.lru_cache(maxsize=1)
def _trainer() -> dict:
    return facts.trainer_default_device()


def evaluate(case: EnvCheck, target: str, f: dict) -> Fitness:
    """The fitness of one row on one target: the judge, then the live probe if any. ``f``:
    the facts the target is judged by (devices.facts_for: an emulated Mac's are its
    recorded Mac's), and the rows' device branches are its rules' (devices.rules_of)."""
    rules = devices.rules_of(target)
    if rules == "mps" and not fitness.is_mac(f):  # every mps check concerns a Mac
        return fitness.na(f"not applicable: this is {f['os']['system']} {f['os']['machine']}; the mps checks concern macOS")
    if case.needs_trainer and "trainer" not in f and devices.is_emulated(target):
        # this machine's TrainingArguments would pick this machine's device, not the recorded Mac's
        return fitness.na(f"not applicable: {target}'s recorded machine has no record of TrainingArguments' default "
                          "device, and this machine's choice says nothing of it; run the env suite on that machine")
    if rules == "cuda" and case.subject != "device-available":
        present = fitness.judge_cuda_present(f)
        if present.outcome != fitness.OK:  # every other cuda check stands behind this one
            return fitness.na(present.summary if present.outcome == fitness.NA
                              else f"CUDA device not usable (see env/device-available): {present.summary}")
    fit = case.fitness_of(f)
    if case.needs_trainer and fit.outcome != fitness.NA and "trainer" not in f:
        fit = case.fitness_of({**f, "trainer": _trainer()})
    if case.autocast and fit.outcome == fitness.OK:
        fit = _confirm_autocast(case, target, f, fit)
    return fit


# an environment check's fitness -> the record's status
STATUS = {fitness.OK: Status.PASS, fitness.NA: Status.SKIP, fitness.LIMIT: Status.XFAIL, fitness.FAIL: Status.FAIL}


def judge(case: EnvCheck, target: str, f: dict) -> Verdict:
    """The check's verdict: not applicable -> skip with the reason; misconfigured -> fail
    with the fix; a known limitation of this version or OS, or a fact that could not be read
    ("cannot tell") -> xfail with what would lift it; fit -> pass, with a note as its reason
    where the judge gave one.
    ``f``: this machine's facts; a target with a recorded machine of its own (the emulated
    Mac) is judged by that machine's (devices.facts_for)."""
    fit = evaluate(case, target, devices.facts_for(target, f))
    message = fit.summary if fit.outcome == fitness.NA else fit.note if fit.outcome == fitness.OK else fit.message()
    return Verdict(STATUS[fit.outcome], Category.NA, message, fit.metrics)


def _confirm_autocast(case: EnvCheck, target: str, f: dict, fit: Fitness) -> Fitness:
    """Run autocast for real where the target is present; the gate alone is not proof."""
    import torch
    backend = devices.backend(target, f)
    if not backend.availability().available:
        return fit  # only the version gate could be judged (mps-available says why)
    with devices.on_device(target):   # an emulated device's rules (its dtypes) hold in the probe
        works, detail = backend.autocast_probe(getattr(torch, case.autocast))
    if works:
        return fitness.ok(f"{fit.summary}; {detail}", **{**fit.metrics, "usable": True})
    if case.gate:
        return fitness.fail(f"{case.autocast} autocast should work with these versions but does not: {detail}",
                            "report it to PyTorch with this run's environment facts", usable=False)
    return fitness.limit(f"{case.autocast} autocast is not supported on {target} with torch "
                         f"{f.get('torch', {}).get('version')}: {detail}", usable=False)
