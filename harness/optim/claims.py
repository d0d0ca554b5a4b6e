"""The optimization claims: one table, every number with its source.

Each ``Claim`` is one technique from the seed documents (kept byte for byte in
tests/fixtures/seeds/, where the self-tests look up every quote): where it is stated (seed
file, section title in the original language with an English gloss, and a short quote that
occurs in the file, with its English), the knob that turns it on
(``transformers.TrainingArguments`` fields, and the plain-PyTorch equivalent), what it is
expected to do to memory and to time on each target class (cpu, cuda, mps), how much
worse than that still counts as "holds", and when it applies at all (gates over a fact set
as ``harness/env/facts.py`` records it, checked by ``applies``). The suites read the numbers
from here; none inline. Where each claim is measured (``WHERE_MEASURED``) makes the
optimization suite's cases (``CASES``: a ``ClaimCase`` per claim, quantity and entry point),
each of which says why it is not measured on a target when it is not (``not_measured``).

What a ratio means. Every expectation is a ratio variant / baseline of one quantity:
  memory, basis "peak":             peak device memory over a training step
  memory, basis "optimizer-state":  bytes held in the optimizer's state tensors
  time,   basis "per-sample":       wall time per training sample over the same data
  time,   basis "optimizer-step":   wall time of optimizer.step() alone
An ``Expect`` is ``lower`` (ratio <= r, r < 1: "lower by at least 1/r"), ``not-higher``
(ratio <= r, r >= 1: "costs at most r") or ``none`` (the source makes no claim; the
suite may still report the ratio). ``scale`` names a setup quantity the ratio is
multiplied by (LoRA: the fraction of parameters left trainable). A claim holds when the
measured ratio <= ``holds_bound`` = r x (1 + slack), and a "lower" claim never loosens
past 1.0 (a reduction must stay a reduction).

``SEED_003_PATH`` is seed 003's measured cumulative table as data: each row adds one
technique to the row before it, so each row-over-previous ratio is the effect of that
technique with the earlier ones on.

What users read (a record's source, basis, quote and document, skip and verdict messages,
gates' reasons) names a document by its title (harness/optim/documents.py), never by its
file or by "seed NNN", and gives every Chinese quote its English beside it
(``documents.glossed``); tests/test_claims.py walks every claim's strings to keep it so.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from packaging.version import Version

from harness.core.cases import Known
from harness.core.records import ClaimKind, Status, Verdict
from harness.env import devices, fitness
from harness.env.facts import package_versions
from harness.optim import documents
from harness.optim.documents import (SEED_000, SEED_001, SEED_002, SEED_003, SEED_004, SEED_FILES,  # noqa: F401
                                     SEED_NAME)
from harness.optim.documents import glossed as zh

TARGET_CLASSES = ("cpu", "cuda", "mps")
QUANTITIES = ("memory", "time")

# The seed documents (SEED_000 .. SEED_004, their files) and their titles: harness/optim/documents.py.
# What users read names a document by its title, never by its file or its number: the
# short names below are what the table's sentences cite, and a Chinese quote always
# carries its English beside it (``zh``: documents.glossed).
M3_POST = documents.short(SEED_000)      # blog post "Transformers optimization (MacBook M3)"
HF_MAC = documents.short(SEED_001)       # HF guide "PyTorch training on Apple silicon"
HF_GPU = documents.short(SEED_002)       # HF guide "Efficient training on a single GPU"
TUTORIAL = documents.short(SEED_003)     # tutorial "Simple GPU-memory optimization for Transformers"
M1_ARTICLE = documents.short(SEED_004)   # article "GPU acceleration comes to PyTorch on M1 Macs"

# The HF single-GPU guide's summary table (its first table): method/tool -> "speeds up
# training" / "optimizes memory use", answered "是" (yes), "否" (no) or "(否)" (no, see the note).
_COLUMN = {"time": ("提高训练速度", "speeds up training"), "memory": ("优化内存利用率", "optimizes memory use")}
_ANSWER = {"是": "yes", "否": "no", "(否)": "no, qualified by a note under the table"}


def _guide_table(row: str, row_en: str | None, quantity: str, answer: str) -> str:
    """A cell of the HF single-GPU guide's summary table, cited with its English."""
    column, column_en = _COLUMN[quantity]
    shown = zh(row, row_en) if row_en else row
    return f"{HF_GPU}, summary table, row {shown}, column {zh(column, column_en)}: {zh(answer, _ANSWER[answer])}"


# --------------------------------------------------------------------------- records

@dataclasses.dataclass(frozen=True)
class Expect:
    kind: str                 # ClaimKind: lower, not-higher or none
    ratio: float | None       # bound on variant / baseline; None for "none"
    source: str               # where the number comes from (seed figure or reasoning)
    basis: str = ""           # what is measured, see the module docstring
    scale: str | None = None  # a setup quantity the ratio is multiplied by

    def __post_init__(self):
        assert self.kind in ClaimKind.ALL, self.kind
        if self.kind == ClaimKind.NONE:
            assert self.ratio is None
        else:
            assert self.ratio is not None and self.ratio > 0 and self.basis
            if self.kind == ClaimKind.LOWER and self.scale is None:
                assert self.ratio < 1, (self.kind, self.ratio)
            if self.kind == ClaimKind.NOT_HIGHER:
                assert self.ratio >= 1, (self.kind, self.ratio)
        assert self.source


# The bases whose ratio is of one part of a step (an Expect's ``basis``), in words: "peak" and
# "per-sample" are of the whole step, what a user's batch must fit in and waits for.
PART_BASES = {"optimizer-state": "optimizer state", "optimizer-step": "optimizer step"}


def part_of(basis) -> str | None:
    """The part of a step a ratio of this basis is of, in words (PART_BASES); None for the whole
    step, and for anything a run file may hold there that is no basis."""
    return PART_BASES.get(basis) if isinstance(basis, str) else None


def lower(ratio: float, source: str, basis: str, scale: str | None = None) -> Expect:
    return Expect(ClaimKind.LOWER, ratio, source, basis, scale)


def not_higher(ratio: float, source: str, basis: str) -> Expect:
    return Expect(ClaimKind.NOT_HIGHER, ratio, source, basis)


def no_claim(source: str) -> Expect:
    return Expect(ClaimKind.NONE, None, source)


@dataclasses.dataclass(frozen=True)
class Slack:
    """How much worse than the claimed ratio still counts as "holds", relative, and why."""
    memory: float
    time: float
    source: str


@dataclasses.dataclass(frozen=True)
class Knob:
    """One way to set a technique through TrainingArguments: field -> value pairs.
    A claim lists alternatives (older / newer transformers names); ``trainer_kwargs``
    picks the first whose fields the installed TrainingArguments has."""
    args: tuple[tuple[str, object], ...]
    note: str = ""

    def kwargs(self) -> dict:
        return dict(self.args)


@dataclasses.dataclass(frozen=True)
class Gate:
    """One applicability condition for some target classes. ``never``: the technique does
    not apply there at all. Otherwise each requirement given must hold. ``via``: whether
    the condition concerns the Trainer knob, the plain-PyTorch path, or both."""
    targets: tuple[str, ...]
    reason: str               # what is missing, in words a user can act on
    fix: str
    source: str
    never: bool = False
    torch: str | None = None            # minimum torch
    when_python: str | None = None      # the torch minimum applies only from this Python up
    macos: str | None = None            # minimum macOS
    facts_gate: str | None = None       # a key of harness.env.fitness.GATES
    package: str | None = None          # must be installed ...
    package_min: str | None = None      # ... at least this version
    cuda_capability: str | None = None  # minimum compute capability of the first CUDA device
    min_cpus: int | None = None
    os: str | None = None               # platform.system() value required
    via: str = "both"                   # "both" | "trainer" | "torch"


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str
    technique: str
    source: str               # seed file name (internal: users read documents.title(source))
    section: str              # section title, original language (occurs in the file)
    section_en: str
    quote: str                # the claim's words, original language (occurs in the file)
    quote_en: str
    knob_trainer: tuple[Knob, ...]
    knob_torch: str
    baseline: str
    variant: str
    memory: Mapping[str, Expect]
    time: Mapping[str, Expect]
    tolerance: Slack
    gates: tuple[Gate, ...] = ()
    notes: str = ""

    def expect(self, quantity: str) -> Mapping[str, Expect]:
        assert quantity in QUANTITIES, quantity
        return self.memory if quantity == "memory" else self.time


def _per_target(cpu: Expect, cuda: Expect, mps: Expect) -> Mapping[str, Expect]:
    return MappingProxyType({"cpu": cpu, "cuda": cuda, "mps": mps})


def _all(e: Expect) -> Mapping[str, Expect]:
    return _per_target(e, e, e)


# --------------------------------------------------------------------------- shared numbers

# A reduction the source states without a figure: at least 5% below the baseline, which is
# beyond the run-to-run spread of an interleaved A/B median (TIME_SLACK's reasoning).
ANY_REDUCTION = 0.95
ANY_REDUCTION_SRC = "no figure in the source: any real reduction, taken as >= 5% (beyond A/B noise)"
SAME = 1.0

SLACK_DEFAULT = Slack(
    memory=0.10, time=0.15,
    source="reasoning: peak memory of one program repeats up to allocator rounding (CUDA caching allocator "
           "blocks/segments, MPS heaps), 10% on the suite's small models whose peaks are tens of MB; step times "
           "as interleaved A/B medians spread ~5-10% on a shared machine, and a Mac adds thermal/power drift "
           f"({M3_POST}: {zh('确保良好的散热', 'ensure good cooling')}), hence 15%")
SLACK_TRANSFER = Slack(
    memory=0.25, time=0.35,
    source=f"reasoning: the ratio was measured by the {TUTORIAL} on chinese-macbert-large (BERT-large, ~326M "
           "params) on an unnamed GPU; a small model splits memory between weights, optimizer state and activations "
           "differently, and time between kernels differently, so the tutorial's ratio is matched within 25% "
           "(memory) / 35% (time)")
SLACK_OPT_STATE = Slack(
    memory=0.05, time=0.35,
    source="reasoning: optimizer-state bytes are counted exactly from optimizer.state tensors; 5% covers "
           "quantization block metadata (absmax per 2048-value block in bitsandbytes) and scalar step counters; "
           "time as SLACK_TRANSFER")
SLACK_DEVICE = Slack(
    memory=0.25, time=0.35,
    source=f"reasoning: the {M1_ARTICLE} compared a first-generation M1 MacBook Pro against its CPU on BERT; "
           "another chip (core counts differ 8x across M-series) moves the ratio, hence 35%")

# Bytes of optimizer state per trainable parameter (fp32 training).
ADAMW_STATE_B = 8      # seed 003 "8bytes*模型参数量"; seed 002 "为每个参数使用8字节"
ADAM8BIT_STATE_B = 2   # seed 002 "8位BNB量化优化器将仅使用（2*3）6GB"


# --------------------------------------------------------------------------- seed 003's path

@dataclasses.dataclass(frozen=True)
class PathStep:
    row: str                  # the row's label as the seed writes it
    claim: str | None         # the claim this row adds (None: the baseline)
    target_object: str        # the seed's 优化对象 column
    batch_size: int
    grad_accum: int
    max_length: int
    memory_gb: float          # the seed's 显存占用, "G"
    time_s: float             # the seed's 训练时间
    trainer_kwargs: tuple[tuple[str, object], ...]   # cumulative
    extra: str = ""           # what is not a TrainingArguments field


@dataclasses.dataclass(frozen=True)
class SeedPath:
    source: str
    section: str
    section_en: str
    title: str                # what users read as the table's name (the file and the word "seed" are code's)
    model: str
    batch_size: int
    max_length: int
    steps: tuple[PathStep, ...]
    notes: str

    def ratios(self, quantity: str) -> list[tuple[str, float]]:
        """Each row over the row before it: (claim, ratio)."""
        key = "memory_gb" if quantity == "memory" else "time_s"
        return [(b.claim, getattr(b, key) / getattr(a, key)) for a, b in zip(self.steps, self.steps[1:])]

    def step(self, claim: str) -> PathStep:
        return next(s for s in self.steps if s.claim == claim)


_BASE = (("per_device_train_batch_size", 32),)
_GA = (("per_device_train_batch_size", 1), ("gradient_accumulation_steps", 32))
_GC = _GA + (("gradient_checkpointing", True),)
_AF = _GC + (("optim", "adafactor"),)

SEED_003_PATH = SeedPath(
    source=SEED_003, section="以chinese-macbert-large模型为例构建优化案例",
    section_en="an optimization case built on chinese-macbert-large",
    title="Memory optimizations, one added per row (chinese-macbert-large table, batch 32, length 128)",
    model="chinese-macbert-large (hfl/chinese-macbert-large, BERT-large architecture)",
    batch_size=32, max_length=128,
    steps=(
        PathStep("Baseline(BS 32,MaxLength 128)", None, "-", 32, 1, 128, 15.1, 44.1, _BASE),
        PathStep("+Gradient Accumulation(BS 1,GA 32)", "gradient-accumulation", "前向激活值", 1, 32, 128,
                 7.5, 122, _GA),
        PathStep("+Gradient Checkpoints(BS 1,GA 32)", "gradient-checkpointing", "前向激活值", 1, 32, 128,
                 7.3, 461, _GC),
        PathStep("+Adafactor Optiomizer(BS 1,GA 32)", "adafactor", "优化器状态", 1, 32, 128, 5.5, 455, _AF),
        PathStep("+Freeze Model(BS 1,GA 32)", "freeze-backbone", "前向激活值/梯度", 1, 32, 128, 3.5, 119, _AF,
                 extra="backbone parameters requires_grad=False (model.bert), head trainable"),
        PathStep("+Data Length(BS 1,GA 32,MaxLength 64)", "shorter-max-length", "前向激活值", 1, 32, 64,
                 3.4, 110, _AF, extra="tokenizer(..., max_length=64, truncation=True, padding='max_length')"),
    ),
    notes=f"Memory is the table's {zh('显存占用', 'GPU memory used')} column in 'G' (GB or GiB not said; ratios are "
          "unaffected), presumably as nvidia-smi shows it (CUDA context included) since the title speaks of "
          f"{zh('显存', 'GPU memory')}; the GPU is not named. {zh('训练时间', 'training time')} is the time of the "
          "whole run on the same data (dataset and epochs not given): compare per sample. The tutorial's "
          "recommended code uses max_length=32, not the table's 64.",
)


def quoted(claim: Claim) -> str:
    """The claim's words as users read them: the original with its English beside it."""
    return documents.glossed(claim.quote, claim.quote_en)


def _r003(claim: str, quantity: str) -> float:
    """Seed 003's measured ratio for the row that adds ``claim`` (rounded to 3 places)."""
    return round(dict(SEED_003_PATH.ratios(quantity))[claim], 3)


# --------------------------------------------------------------------------- gates used by several claims

def _never(targets, reason, fix, source, via="both") -> Gate:
    return Gate(tuple(targets), reason, fix, source, never=True, via=via)


NO_DISTRIBUTED_MPS = (f"{HF_MAC}: the backends for distributed settings (gloo, nccl) "
                      f"{zh('不支持mps设备', 'do not support the mps device')}")


# --------------------------------------------------------------------------- the table

CLAIMS: tuple[Claim, ...] = (
    Claim(
        name="larger-batch", technique="batch size choice: a larger batch for throughput",
        source=SEED_002, section="批处理大小选择", section_en="batch size choice",
        quote="最大化吞吐量（样本/秒）可以降低训练成本。通常通过尽可能充分利用GPU并将GPU内存填满来实现这一目标。",
        quote_en="maximizing throughput (samples/s) lowers cost, usually by using the GPU fully and filling its memory",
        knob_trainer=(Knob((("per_device_train_batch_size", 32),), "vs a smaller value, e.g. 8"),),
        knob_torch="DataLoader(batch_size=32) instead of 8",
        baseline="batch 8", variant="batch 32 (same samples, same model)",
        memory=_all(no_claim("a larger batch holds more activations: memory rises; the guide's 'yes' for memory "
                             "means choosing a batch that fills memory, not a reduction")),
        time=_per_target(
            cpu=no_claim("the guide concerns GPUs; on a CPU larger GEMMs help little once cores are busy"),
            cuda=lower(ANY_REDUCTION, _guide_table("批处理大小选择", "batch size choice", "time", "是") + "; "
                       + ANY_REDUCTION_SRC, "per-sample"),
            mps=lower(ANY_REDUCTION, f"{HF_GPU}, summary table (GPUs generally); {M1_ARTICLE}: MPS beats the CPU "
                      "clearly only at larger batches, "
                      f"{zh('对于较小的批量，这不是很明显', 'for smaller batches this is not very noticeable')}; "
                      + ANY_REDUCTION_SRC, "per-sample")),
        tolerance=SLACK_DEFAULT,
        notes="Measure per sample: a larger batch makes each step slower but each sample cheaper.",
    ),
    Claim(
        name="batch-multiple-of-8", technique="batch size choice: powers of two / multiples of 8",
        source=SEED_002, section="批处理大小选择", section_en="batch size choice",
        quote="建议使用大小为2^N的批处理大小和输入/输出神经元计数。通常是8的倍数",
        quote_en="use batch sizes and layer widths of 2^N, usually multiples of 8",
        knob_trainer=(Knob((("per_device_train_batch_size", 32),), "vs 31 or 33"),),
        knob_torch="DataLoader(batch_size=32) instead of 31/33",
        baseline="batch 31 (one below a multiple of 8)", variant="batch 32",
        memory=_all(no_claim("the advice concerns speed (Tensor Core tiling)")),
        time=_per_target(
            cpu=no_claim("the stated reason is NVIDIA Tensor Core tile sizes; no claim for CPUs"),
            cuda=not_higher(SAME, f"{HF_GPU}: {zh('Tensor Core要求', 'Tensor Core requirements')} ... "
                            f"{zh('对于fp16数据类型，推荐使用8的倍数', 'for the fp16 data type, multiples of 8 are recommended')}"
                            "; per sample, a multiple of 8 is no slower than one below it", "per-sample"),
            mps=not_higher(SAME, f"the {HF_GPU} gives the advice for GPUs without naming a vendor; the suite shows "
                           "whether Apple GPUs share it", "per-sample")),
        tolerance=SLACK_DEFAULT,
        notes="The strongest effect is in fp16 on Tensor Cores; in fp32 on CUDA the difference may be nil.",
    ),
    Claim(
        name="gradient-accumulation", technique="gradient accumulation (smaller micro-batch, same effective batch)",
        source=SEED_002, section="梯度累积", section_en="gradient accumulation",
        quote="通过使用梯度累积，可以将**有效批次大小**增加到GPU内存容量所施加的限制之外",
        quote_en="gradient accumulation raises the effective batch size beyond what GPU memory allows",
        knob_trainer=(Knob((("per_device_train_batch_size", 1), ("gradient_accumulation_steps", 32)),
                           "the tutorial's setting; the HF guide's example is batch 1 x 4"),),
        knob_torch="loss / accumulation_steps; backward every micro-batch; optimizer.step() and zero_grad() every "
                   "accumulation_steps micro-batches",
        baseline="batch 32, no accumulation", variant="batch 1, gradient_accumulation_steps=32",
        memory=_all(lower(_r003("gradient-accumulation", "memory"),
                          f"{TUTORIAL}, table: 15.1G -> 7.5G (BS 32 -> BS 1, GA 32)", "peak")),
        time=_all(not_higher(_r003("gradient-accumulation", "time"),
                             f"{TUTORIAL}, table: 44.1s -> 122s (x2.77); "
                             + _guide_table("梯度累积", "gradient accumulation", "time", "否")
                             + f", and it {zh('可能会减慢训练过程', 'may slow down training')}", "per-sample")),
        tolerance=SLACK_TRANSFER,
        notes=f"The {M3_POST} gives the same advice for a Mac: "
              f"{zh('小批量训练（Gradient Accumulation）', 'small-batch training, gradient accumulation')} ... "
              f"{zh('降低每次迭代所需的显存', 'lowers the GPU memory each iteration needs')}. The memory ratio depends "
              "on how much of the peak is activations; the tutorial's regime is activation-heavy (BERT-large, "
              "length 128).",
    ),
    Claim(
        name="gradient-checkpointing", technique="gradient (activation) checkpointing",
        source=SEED_002, section="梯度检查点", section_en="gradient checkpointing",
        quote="虽然梯度检查点可能提高内存效率，但会使训练速度减慢约20%。",
        quote_en="checkpointing may improve memory efficiency but slows training by about 20%",
        knob_trainer=(Knob((("activation_checkpointing", True),), "transformers 5.x name"),
                      Knob((("gradient_checkpointing", True),), "the documents' name; a deprecated alias in 5.x")),
        knob_torch="torch.utils.checkpoint via model.gradient_checkpointing_enable() (activation_checkpointing_enable() "
                   "in transformers 5.x, where the old name is a deprecated alias)",
        baseline="batch 1, GA 32 (the tutorial's previous row)", variant="the same with checkpointing",
        memory=_all(lower(_r003("gradient-checkpointing", "memory"),
                          f"{TUTORIAL}, table: 7.5G -> 7.3G at BS 1, GA 32 (the only figure; at a larger batch "
                          "activations dominate and the saving is larger)", "peak")),
        time=_all(not_higher(1.2, f"{HF_GPU}: {zh('会使训练速度减慢约20%', 'slows training down by about 20%')}",
                             "per-sample")),
        tolerance=SLACK_DEFAULT,
        notes="The tutorial measured 122s -> 461s (x3.78) for this row, far beyond the guide's ~20%; the path keeps "
              "the tutorial's figure, this claim the guide's.",
    ),
    Claim(
        name="fp16-autocast", technique="fp16 mixed precision (autocast)",
        source=SEED_002, section="fp16", section_en="fp16",
        quote="混合精度训练的主要优势来自于将激活保存在半精度（fp16）中",
        quote_en="the main gain of mixed precision is keeping activations in half precision",
        knob_trainer=(Knob((("fp16", True),)),),
        knob_torch="torch.autocast(device_type, dtype=torch.float16) + torch.amp.GradScaler(device_type)",
        baseline="float32", variant="float16 autocast",
        memory=_all(no_claim(_guide_table("混合精度训练", "mixed precision training", "memory", "(否)")
                             + "; the note: "
                             + zh("对于大模型和小批处理大小，内存使用量会更大", "for large models and small batch sizes, "
                                  "memory use is higher")
                             + ", weights exist in 16 and 32 bit: 1.5x; depends on model and batch")),
        time=_per_target(
            cpu=no_claim("the guide concerns GPUs; most CPUs have no fast fp16 arithmetic"),
            cuda=lower(ANY_REDUCTION, _guide_table("混合精度训练", "mixed precision training", "time", "是") + "; "
                       + ANY_REDUCTION_SRC, "per-sample"),
            mps=lower(ANY_REDUCTION, f"{HF_GPU}, summary table (GPUs); {M3_POST}, for a Mac: "
                      f"{zh('使用混合精度训练', 'use mixed precision training')} ... "
                      f"{zh('来加速训练过程', 'to speed up training')}; " + ANY_REDUCTION_SRC, "per-sample")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(("mps",), "fp16 autocast on MPS needs torch >= 2.5", "pip install -U 'torch>=2.5'",
                 fitness.GATES["mps-fp16-autocast"].source, facts_gate="mps-fp16-autocast"),
            Gate(("mps",), "float16 training with loss scaling (torch.amp.GradScaler('mps')) on MPS needs torch >= 2.8",
                 "pip install -U 'torch>=2.8', or train under bf16 autocast, which needs no scaler",
                 "torch/amp/grad_scaler.py and native_functions.yaml of torch 2.5 to 2.8: before 2.8 unscale_ takes "
                 "the scale to float64, which MPS refuses, and MPS has no _amp_update_scale_ kernel; accelerate's "
                 "get_grad_scaler asks torch 2.8 of MPS", torch="2.8", via="torch"),
            Gate(("mps",), "Trainer(fp16=True) on MPS needs torch >= 2.8 and accelerate >= 1.11",
                 "pip install -U 'torch>=2.8' 'accelerate>=1.11', or use plain torch.autocast('mps')",
                 fitness.GATES["mps-trainer-fp16"].source, facts_gate="mps-trainer-fp16", via="trainer"),
        ),
    ),
    Claim(
        name="bf16-autocast", technique="bf16 mixed precision (autocast)",
        source=SEED_002, section="BF16", section_en="bf16",
        quote="如果您可以访问Ampere或更新的硬件，您可以使用bf16进行混合精度训练和评估",
        quote_en="with Ampere or newer hardware you can train and evaluate in bf16 mixed precision",
        knob_trainer=(Knob((("bf16", True),)),),
        knob_torch="torch.autocast(device_type, dtype=torch.bfloat16) (no GradScaler needed)",
        baseline="float32", variant="bfloat16 autocast",
        memory=_all(no_claim(_guide_table("混合精度训练", "mixed precision training", "memory", "(否)")
                             + "; depends on model and batch")),
        time=_per_target(
            cpu=no_claim("the guide speaks of Ampere GPUs only"),
            cuda=lower(ANY_REDUCTION, _guide_table("混合精度训练", "mixed precision training", "time", "是") + "; "
                       + ANY_REDUCTION_SRC, "per-sample"),
            mps=no_claim("the guide speaks of Ampere GPUs only; Apple GPUs have no bf16 matrix units before M4 "
                         "(reasoning), so no speed claim is carried over")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(("cuda",), "bf16 needs an Ampere or newer GPU (compute capability >= 8.0)",
                 "use fp16=True instead",
                 f"{HF_GPU}: {zh('如果您可以访问Ampere或更新的硬件', 'if you have access to Ampere or newer hardware')}"
                 "; transformers TrainingArguments raises 'Your setup doesn't support bf16/gpu' otherwise",
                 cuda_capability="8.0"),
            Gate(("mps",), "bf16 autocast on MPS needs torch >= 2.6 and macOS 14",
                 "pip install -U 'torch>=2.6'; update macOS to 14", fitness.GATES["mps-bf16-autocast"].source,
                 facts_gate="mps-bf16-autocast"),
        ),
    ),
    Claim(
        name="tf32", technique="TF32 matmuls (CUDA Ampere only)",
        source=SEED_002, section="TF32", section_en="TF32",
        quote="通过启用tf32支持，您可以获得高达3倍的吞吐量改进",
        quote_en="enabling tf32 can give up to 3x throughput",
        knob_trainer=(Knob((("tf32", True),)),),
        knob_torch="torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True "
                   "(torch >= 2.9: torch.backends.fp32_precision = 'tf32')",
        baseline="float32 matmuls in full precision", variant="TF32 matmuls",
        memory=_all(no_claim("TF32 changes only how matmuls are computed; tensors stay float32")),
        time=_per_target(
            cpu=no_claim("TF32 is an NVIDIA Ampere data type"),
            cuda=lower(ANY_REDUCTION, f"{HF_GPU}: {zh('高达3倍的吞吐量改进', 'up to 3x throughput improvement')}; "
                       "'up to' 3x is an upper figure, not a bound, so the bound is: " + ANY_REDUCTION_SRC,
                       "per-sample"),
            mps=no_claim("TF32 is an NVIDIA Ampere data type")),
        tolerance=SLACK_DEFAULT,
        gates=(
            _never(("cpu", "mps"), "TF32 is a CUDA-internal data type of NVIDIA Ampere+ GPUs; TrainingArguments("
                   "tf32=True) raises '--tf32 requires Ampere or a newer GPU arch' without one",
                   "leave tf32 unset (or False) off CUDA; on a Mac use fp16/bf16 autocast for speed",
                   f"{HF_GPU}: {zh('CUDA将在可能的情况下自动切换到使用tf32', 'CUDA switches to tf32 on its own where it can')}"
                   f" ... {zh('假设所使用的GPU来自Ampere系列', 'assuming the GPU used is of the Ampere series')}; "
                   "transformers training_args.py (is_torch_tf32_available)"),
            Gate(("cuda",), "TF32 needs an Ampere or newer GPU (compute capability >= 8.0)",
                 "leave tf32 unset on older GPUs", "transformers is_torch_tf32_available: major >= 8",
                 cuda_capability="8.0"),
        ),
    ),
    Claim(
        name="adafactor", technique="Adafactor optimizer instead of AdamW",
        source=SEED_002, section="Adafactor", section_en="Adafactor",
        quote="Adafactor不会为权重矩阵中的每个元素存储滚动平均值",
        quote_en="Adafactor does not keep a running average per weight element",
        knob_trainer=(Knob((("optim", "adafactor"),)),),
        knob_torch="transformers.optimization.Adafactor(params, scale_parameter=False, relative_step=False, lr=...) "
                   "(or torch.optim.Adafactor, torch >= 2.5)",
        baseline="AdamW (the tutorial's previous row: BS 1, GA 32, checkpointing)", variant="Adafactor",
        memory=_all(lower(_r003("adafactor", "memory"), f"{TUTORIAL}, table: 7.3G -> 5.5G; state: AdamW 8 B/param "
                          f"vs Adafactor ~4, by the {HF_GPU}: {zh('略多于4字节', 'slightly more than 4 bytes')}",
                          "peak")),
        time=_all(not_higher(SAME, f"{TUTORIAL}, table: 461s -> 455s; {HF_GPU}: "
                             f"{zh('在保持吞吐量的同时', 'while keeping the throughput')}", "per-sample")),
        tolerance=SLACK_TRANSFER,
        notes=f"The {HF_GPU} warns that Adafactor may converge worse than Adam: "
              f"{zh('收敛性可能比Adam更差', 'its convergence may be worse than Adam')}; not measured here.",
    ),
    Claim(
        name="adamw-8bit", technique="8-bit AdamW (bitsandbytes)",
        source=SEED_002, section="8位Adam", section_en="8-bit Adam",
        quote="8位Adam保留完整状态并对其进行量化",
        quote_en="8-bit Adam keeps the full state and quantizes it",
        knob_trainer=(Knob((("optim", "adamw_bnb_8bit"),)),),
        knob_torch="bitsandbytes.optim.AdamW8bit(params, lr=...)",
        baseline="AdamW (fp32 state)", variant="bitsandbytes 8-bit AdamW",
        memory=_all(lower(ADAM8BIT_STATE_B / ADAMW_STATE_B, f"{HF_GPU}: 8 bytes/param for AdamW (24GB for t5-3b) "
                          "vs 2 bytes/param 8-bit (2*3 = 6GB): 2/8", "optimizer-state")),
        time=_all(no_claim(f"{HF_GPU}: {zh('比使用Adafactor时的吞吐量稍高', 'slightly higher throughput than with Adafactor')}"
                           " — relative to Adafactor, not to AdamW")),
        tolerance=SLACK_OPT_STATE,
        gates=(
            _never(("mps",), "bitsandbytes has no released MPS support: its 8-bit optimizers do not run on the mps "
                   "device", "use optim='adafactor' for less optimizer memory on a Mac, or train this step on CUDA",
                   "DESIGN.md: bitsandbytes 8-bit optimizers: CPU from 0.50; no released MPS support"),
            Gate(("cpu",), "bitsandbytes 8-bit optimizers run on the CPU from bitsandbytes 0.50",
                 "pip install -U 'bitsandbytes>=0.50'", "DESIGN.md: bitsandbytes 8-bit optimizers: CPU from 0.50",
                 package="bitsandbytes", package_min="0.50"),
            Gate(("cuda",), "8-bit AdamW needs the bitsandbytes package", "pip install bitsandbytes",
                 f"{HF_GPU}: " + zh("首先，按照GitHub repo中的安装指南安装实现8位Adam优化器的bitsandbytes库",
                                    "first install bitsandbytes, the library that implements the 8-bit Adam "
                                    "optimizer, following the installation guide in its GitHub repo"),
                 package="bitsandbytes"),
        ),
    ),
    Claim(
        name="fused-adamw", technique="fused AdamW",
        source=SEED_002, section="优化器选择", section_en="optimizer choice",
        quote="`adamw_apex_fused`将为您提供所有支持的AdamW优化器中最快的训练体验",
        quote_en="adamw_apex_fused gives the fastest training of all supported AdamW optimizers",
        knob_trainer=(Knob((("optim", "adamw_torch_fused"),), "the torch fused kernel (apex is CUDA-only, built "
                           "separately)"),),
        knob_torch="torch.optim.AdamW(params, fused=True)",
        baseline="torch.optim.AdamW(foreach=True) (through the Trainer: optim='adamw_torch', foreach on CUDA)",
        variant="torch.optim.AdamW(fused=True)",
        memory=_all(not_higher(SAME, "reasoning: the same exp_avg / exp_avg_sq state (8 B/param) in one kernel",
                               "optimizer-state")),
        time=_all(lower(ANY_REDUCTION, f"{HF_GPU}: "
                        f"{zh('最快的训练体验', 'the fastest training experience, of all supported AdamW optimizers')}; "
                        + ANY_REDUCTION_SRC, "optimizer-step")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(("cuda",), "fused AdamW needs torch >= 2.0 on CUDA", "pip install -U 'torch>=2.0'",
                 "torch 2.0 torch/optim/adamw.py: the fused implementation", torch="2.0"),
            Gate(("cpu",), "fused AdamW on the CPU needs torch >= 2.4", "pip install -U 'torch>=2.4'",
                 "torch/utils/_foreach_utils.py _get_fused_kernels_supported_devices: 'cpu' from 2.4 "
                 "(read from the 2.3.0 and 2.4.0 wheels)", torch="2.4"),
            Gate(("mps",), "fused AdamW on MPS needs torch >= 2.5", "pip install -U 'torch>=2.5'",
                 "torch/utils/_foreach_utils.py _get_fused_kernels_supported_devices: 'mps' from 2.5 (read from the "
                 "2.4.0 and 2.5.1 wheels); pytorch/pytorch#127242 '[MPS] Fused Adam & AdamW'", torch="2.5"),
        ),
    ),
    Claim(
        name="dataloader-workers", technique="data preloading: DataLoader worker processes",
        source=SEED_002, section="数据预加载", section_en="data preloading",
        quote="`DataLoader(num_workers=4, ...)` - 生成几个工作进程以更快地预加载数据",
        quote_en="num_workers=4 spawns worker processes to preload data faster",
        knob_trainer=(Knob((("dataloader_num_workers", 4),)),),
        knob_torch="DataLoader(dataset, num_workers=4)",
        baseline="num_workers=0 (loading in the main process)", variant="num_workers=4",
        memory=_all(no_claim(_guide_table("数据预加载", "data preloading", "memory", "否")
                             + "; workers use host memory, not the device's")),
        time=_all(lower(ANY_REDUCTION, _guide_table("数据预加载", "data preloading", "time", "是")
                        + f", when loading is the bottleneck; the {M3_POST} says the same for a Mac: "
                        + zh("以减少数据加载的瓶颈", "to reduce the data-loading bottleneck") + "; "
                        + ANY_REDUCTION_SRC, "per-sample")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(TARGET_CLASSES, "worker processes need at least 2 usable CPU cores to overlap with training",
                 "run on a machine (or container CPU quota) with more cores; keep num_workers=0 here",
                 "reasoning: with one core the workers and the training loop time-share it", min_cpus=2),
        ),
        notes="Holds only when loading is the bottleneck: the suite measures it on a loader that costs time per "
              "row (documents tokenized on the fly: harness/optim/trainer_runs.py text_dataset), its workers "
              "persistent so the timed calls see loading, not start-up (reported apart, with how they started). "
              "On macOS torch starts workers with 'spawn' (slower start-up; the dataset and the collate "
              "function are pickled per worker), but the Trainer starts them with 'fork' on MPS from two "
              "workers on (transformers' default there; dataloader_multiprocessing_context changes it).",
    ),
    Claim(
        name="pin-memory", technique="data preloading: pinned host memory",
        source=SEED_002, section="数据预加载", section_en="data preloading",
        quote="`DataLoader(pin_memory=True, ...)` - 确保数据预加载到CPU上的固定内存中",
        quote_en="pin_memory=True preloads data into pinned CPU memory for faster host-to-device copies",
        knob_trainer=(Knob((("dataloader_pin_memory", True),), "the Trainer's default is already True"),),
        knob_torch="DataLoader(dataset, pin_memory=True); tensor.to(device, non_blocking=True)",
        baseline="pin_memory=False", variant="pin_memory=True",
        memory=_all(no_claim(_guide_table("数据预加载", "data preloading", "memory", "否"))),
        time=_per_target(
            cpu=no_claim("pinning concerns host-to-device copies; the CPU target has none"),
            cuda=not_higher(SAME, f"{HF_GPU}: " + zh("通常会导致从CPU到GPU内存的传输速度更快",
                                                     "usually makes transfers from CPU to GPU memory faster")
                            + "; the copy is a small part of a step, so the bound is 'no slower'", "per-sample"),
            mps=no_claim("DataLoader turns pin_memory off on MPS")),
        tolerance=SLACK_DEFAULT,
        gates=(
            _never(("cpu",), "pinned memory speeds host-to-accelerator copies; with the CPU as target there is no copy",
                   "nothing to do: dataloader_pin_memory has no effect here",
                   f"{HF_GPU}: {zh('从CPU到GPU内存的传输', 'transfers from CPU to GPU memory')}; torch DataLoader "
                   "pins only when an accelerator is available"),
            _never(("mps",), "torch's DataLoader disables pin_memory on MPS ('pin_memory' argument is set as true "
                   "but not supported on MPS now) — unified memory needs no staging copy",
                   "set dataloader_pin_memory=False on a Mac to silence the warning",
                   "torch/utils/data/dataloader.py (pytorch/pytorch#86060), torch 2.15; "
                   f"{HF_MAC}: {zh('GPU 的统一内存架构', 'the unified memory architecture of the GPU')}"),
        ),
    ),
    Claim(
        name="torch-compile", technique="torch.compile",
        source=SEED_002, section="使用torch.compile", section_en="using torch.compile",
        quote="只需添加一行代码即可优化您的代码：`model = torch.compile(model)`",
        quote_en="one line optimizes your code: model = torch.compile(model)",
        knob_trainer=(Knob((("torch_compile", True),)),),
        knob_torch="model = torch.compile(model) (after warm-up steps; compile time excluded)",
        baseline="eager", variant="torch.compile (inductor)",
        memory=_all(no_claim(_guide_table("torch.compile", None, "memory", "否"))),
        time=_all(lower(ANY_REDUCTION, _guide_table("torch.compile", None, "time", "是") + "; " + ANY_REDUCTION_SRC,
                        "per-sample")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(TARGET_CLASSES, "torch.compile needs torch >= 2.0", "pip install -U 'torch>=2.0'",
                 f"{HF_GPU}: {zh('PyTorch 2.0引入了一个新的编译函数', 'PyTorch 2.0 introduced a new compile function')}",
                 torch="2.0"),
            Gate(("mps",), "torch.compile on MPS is a prototype from torch 2.7", "pip install -U 'torch>=2.7'",
                 "DESIGN.md: torch.compile on MPS: prototype from 2.7 (PyTorch 2.7 release notes)", torch="2.7"),
            Gate(TARGET_CLASSES, "torch.compile supports Python 3.12 from torch 2.4", "pip install -U 'torch>=2.4'",
                 "PyTorch 2.4 release notes: torch.compile supports Python 3.12", torch="2.4", when_python="3.12"),
            Gate(TARGET_CLASSES, "torch.compile supports Python 3.13 from torch 2.6", "pip install -U 'torch>=2.6'",
                 "PyTorch 2.6 release notes: torch.compile supports Python 3.13", torch="2.6", when_python="3.13"),
        ),
        notes="Inductor on cpu/mps generates C++ / Metal code: a C++ compiler is needed on the CPU (Xcode command "
              "line tools on a Mac).",
    ),
    Claim(
        name="peft-lora", technique="PEFT LoRA adapters",
        source=SEED_002, section="使用🤗 PEFT", section_en="using PEFT",
        quote="与优化器状态和梯度相关的内存",
        quote_en="the memory for optimizer state and gradients (is greatly reduced)",
        knob_trainer=(Knob((), "not a TrainingArguments field: model = peft.get_peft_model(model, LoraConfig(...))"),),
        knob_torch="peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=[...])): base weights frozen, "
                   "low-rank adapters trainable",
        baseline="full fine-tuning", variant="LoRA adapters only",
        memory=_all(lower(1.0, f"{HF_GPU}: {zh('优化器状态', 'optimizer state')} 12 * 7 = 84 GB -> 12 * 0.2 = 2.4GB: "
                          "the state scales with the trainable parameters (ratio = trainable fraction)",
                          "optimizer-state", scale="trainable_fraction")),
        time=_all(no_claim(_guide_table("参数高效微调（PEFT）", "parameter-efficient fine-tuning, PEFT", "time",
                                        "否"))),
        tolerance=SLACK_OPT_STATE,
        gates=(
            Gate(TARGET_CLASSES, "LoRA needs the peft package", "pip install peft",
                 f"{HF_GPU}: {zh('在PEFT文档或PEFT存储库中详细了解', 'learn more in the PEFT docs or the PEFT repository')}",
                 package="peft"),
        ),
    ),
    Claim(
        name="freeze-backbone", technique="freeze the pretrained backbone, train the head",
        source=SEED_003, section="显存优化策略", section_en="memory optimization strategies",
        quote="+Freeze Model(BS 1,GA 32)", quote_en="+freeze the model (row of the measured table)",
        knob_trainer=(Knob((), "not a TrainingArguments field: for p in model.bert.parameters(): "
                           "p.requires_grad = False"),),
        knob_torch="requires_grad_(False) on the backbone; optimizer over the trainable parameters only",
        baseline="the tutorial's previous row (BS 1, GA 32, checkpointing, Adafactor)", variant="backbone frozen",
        memory=_all(lower(_r003("freeze-backbone", "memory"), f"{TUTORIAL}, table: 5.5G -> 3.5G", "peak")),
        time=_all(lower(_r003("freeze-backbone", "time"), f"{TUTORIAL}, table: 455s -> 119s (with checkpointing on, "
                        "which a frozen backbone no longer recomputes)", "per-sample")),
        tolerance=SLACK_TRANSFER,
        notes=f"The {M1_ARTICLE} did the same on MPS, "
              f"{zh('冻结已经预先训练好的模型*核心*', 'freezing the already pretrained *core* of the model')}: ~4 min "
              "instead of ~18 min, but at a different batch (about 64 vs 1), so its ratio is not used.",
    ),
    Claim(
        name="shorter-max-length", technique="a shorter max sequence length",
        source=SEED_003, section="显存优化策略", section_en="memory optimization strategies",
        quote="+Data Length(BS 1,GA 32,MaxLength 64)", quote_en="+data length 64 instead of 128",
        knob_trainer=(Knob((), "not a TrainingArguments field: tokenizer(..., max_length=64, truncation=True)"),),
        knob_torch="tokenizer(texts, max_length=64, truncation=True, padding='max_length')",
        baseline="max length 128 (the tutorial's previous row)", variant="max length 64",
        memory=_all(lower(_r003("shorter-max-length", "memory"), f"{TUTORIAL}, table: 3.5G -> 3.4G", "peak")),
        time=_all(lower(_r003("shorter-max-length", "time"), f"{TUTORIAL}, table: 119s -> 110s", "per-sample")),
        tolerance=SLACK_TRANSFER,
        notes="Activations scale with length (attention scores with its square); with a frozen backbone at batch 1 "
              "little is left to save, hence the tutorial's small ratio.",
    ),
    Claim(
        name="dynamic-padding", technique="dynamic padding / grouping by length",
        source=SEED_003, section="显存优化策略", section_en="memory optimization strategies",
        quote='padding="max_length"', quote_en="the tutorial pads every example to max_length",
        knob_trainer=(Knob((("train_sampling_strategy", "group_by_length"),), "transformers 5.x"),
                      Knob((("group_by_length", True),), "transformers 4.x")),
        knob_torch="tokenizer(..., padding=False) + DataCollatorWithPadding (padding='longest' per batch)",
        baseline="padding='max_length'", variant="padding to the longest in the batch (grouped by length)",
        memory=_all(not_higher(SAME, f"reasoning from the '+Data Length' row of the {TUTORIAL}, whose "
                               f"{zh('优化对象', 'what it optimizes')} is {zh('前向激活值', 'forward activations')}: "
                               "a batch padded to its longest is never longer than max_length", "peak")),
        time=_all(not_higher(SAME, "same reasoning: fewer or equal tokens per batch", "per-sample")),
        tolerance=SLACK_DEFAULT,
        notes="On MPS every new input shape builds and caches another MPSGraph; varying lengths cost graph builds "
              "until every length has been seen once, so warm-up must cover the shapes.",
    ),
    Claim(
        name="sdpa-attention", technique="PyTorch SDPA attention instead of eager attention",
        source=SEED_002, section="使用PyTorch原生注意力和Flash Attention", section_en="PyTorch native attention and Flash "
        "Attention",
        quote="允许使用融合的GPU内核，如[内存高效注意力]", quote_en="allows fused GPU kernels such as memory-efficient attention",
        knob_trainer=(Knob((), "not a TrainingArguments field: from_pretrained(..., attn_implementation='sdpa') vs "
                           "'eager' (the guide's model.to_bettertransformer() via optimum is the older route)"),),
        knob_torch="torch.nn.functional.scaled_dot_product_attention",
        baseline="attn_implementation='eager'", variant="attn_implementation='sdpa'",
        memory=_per_target(
            cpu=not_higher(SAME, "reasoning: the CPU's SDPA kernel does not materialize more than eager", "peak"),
            cuda=lower(ANY_REDUCTION, f"{HF_GPU}: {zh('内存高效注意力', 'memory-efficient attention')} kernels; "
                       + ANY_REDUCTION_SRC, "peak"),
            mps=not_higher(SAME, "the fused kernels the guide names are CUDA kernels; on MPS only 'no worse' is carried "
                           "over", "peak")),
        time=_per_target(
            cpu=not_higher(SAME, "reasoning as for memory", "per-sample"),
            cuda=lower(ANY_REDUCTION, f"{HF_GPU}: {zh('融合的GPU内核', 'fused GPU kernels')}; " + ANY_REDUCTION_SRC,
                       "per-sample"),
            mps=not_higher(SAME, "as for memory", "per-sample")),
        tolerance=SLACK_DEFAULT,
        gates=(
            Gate(TARGET_CLASSES, "scaled_dot_product_attention needs torch >= 2.0", "pip install -U 'torch>=2.0'",
                 f"{HF_GPU}: " + zh("PyTorch 2.0发布了一个原生的scaled_dot_product_attention",
                                    "PyTorch 2.0 released a native scaled_dot_product_attention"), torch="2.0"),
        ),
        notes=f"The model class must support SDPA (model._supports_sdpa). The {HF_GPU}: Flash kernels only without "
              "an attention_mask, " + zh("只有在没有提供attention_mask时才能分派到Flash Attention",
                                         "dispatches to Flash Attention only when no attention_mask is given") + ".",
    ),
    Claim(
        name="accelerator-vs-cpu", technique="training on the Apple GPU (MPS) instead of the CPU",
        source=SEED_004, section="培训测试", section_en="training test",
        quote="对于 1000 行 TREC 数据的训练，CPU 需要大约 25 分钟，MPS 需要大约 18 分钟",
        quote_en="training on 1000 TREC rows took ~25 min on the CPU and ~18 min on MPS",
        knob_trainer=(Knob((), f"TrainingArguments picks mps by default when available (the {HF_MAC}); the "
                           "baseline is use_cpu=True"),),
        knob_torch="model.to('mps') and every batch .to('mps'), vs the CPU",
        baseline="the CPU of the same machine", variant="the mps device",
        memory=_all(no_claim("unified memory: both use the same RAM; no memory claim")),
        time=_per_target(
            cpu=no_claim("the CPU is this comparison's baseline"),
            cuda=no_claim(f"the {M1_ARTICLE} compares MPS with the CPU only"),
            mps=lower(round(18 / 25, 2), f"{M1_ARTICLE}: CPU ~25 min, MPS ~18 min (BERT, 1000 TREC rows, "
                      "first-generation M1 MacBook Pro)", "per-sample")),
        tolerance=SLACK_DEVICE,
        gates=(
            _never(("cpu",), "the CPU is the baseline of this comparison, not a variant", "run the mps target",
                   M1_ARTICLE),
            _never(("cuda",), f"the {M1_ARTICLE} compares MPS with the CPU; it makes no CUDA claim",
                   "run the mps target", M1_ARTICLE),
        ),
        notes="The article's MPS run used batch 1, "
              + zh("MPS 设备(GPU)可以处理不超过一个*一个*的批处理大小",
                   "the MPS device, the GPU, could handle a batch size of no more than *one*")
              + ", and the CPU run batch 32, so the article's ratio mixes device and batch; the suite compares at one "
              f"batch size. The article also quotes the PyTorch blog: {zh('训练加速约 7 倍', 'about 7x faster training')} "
              "on an M1 Ultra.",
    ),
    Claim(
        name="deepspeed-zero", technique="DeepSpeed ZeRO (applicability only)",
        source=SEED_002, section="DeepSpeed ZeRO", section_en="DeepSpeed ZeRO",
        quote="如果您的模型适合单个GPU并且有足够的空间来容纳小批量大小，则不需要使用DeepSpeed，因为它只会减慢速度",
        quote_en="if the model fits one GPU with room for a small batch, DeepSpeed is not needed: it only slows down",
        knob_trainer=(Knob((("deepspeed", "ds_config_zero2.json"),)),),
        knob_torch="deepspeed.initialize(model=..., config=...) under the deepspeed launcher",
        baseline="plain training", variant="ZeRO stage 2/3 (+ CPU offload)",
        memory=_all(no_claim("applicability only: ZeRO helps when the model does not fit one GPU")),
        time=_all(no_claim(f"applicability only; {HF_GPU}: {zh('只会减慢速度', 'it will only slow things down')} "
                           "when the model fits")),
        tolerance=SLACK_DEFAULT,
        gates=(
            _never(("mps",), "DeepSpeed ZeRO does not run on MPS: it needs a distributed backend and device ops that do "
                   "not serve mps", "on a Mac use gradient accumulation, checkpointing, Adafactor or LoRA instead",
                   NO_DISTRIBUTED_MPS),
            _never(("cpu",), "DeepSpeed ZeRO partitions state across accelerator processes (offloading to the CPU "
                   "from a GPU); on a single CPU there is nothing to partition",
                   "use it on CUDA GPUs; on a CPU use the memory techniques of this table",
                   f"{HF_GPU}: ZeRO + CPU Offload ... {zh('模型无法适应单个GPU', 'the model cannot fit on a single GPU')}"),
            Gate(("cuda",), "DeepSpeed runs on Linux", "use Linux (WSL on Windows)",
                 "DeepSpeed installation docs: Linux is the supported platform", os="Linux"),
            Gate(("cuda",), "DeepSpeed ZeRO needs the deepspeed package", "pip install deepspeed",
                 f"{HF_GPU}: {zh('您需要单独安装该库', 'you need to install the library separately')}",
                 package="deepspeed"),
        ),
    ),
    Claim(
        name="torch-cuda-amp-on-mac", technique="torch.cuda.amp mixed precision on a Mac",
        source=SEED_000, section="混合精度训练", section_en="mixed precision training",
        quote="在 PyTorch 中，可以通过 `torch.cuda.amp` 进行混合精度训练",
        quote_en="in PyTorch, use torch.cuda.amp for mixed precision training",
        knob_trainer=(Knob((), "not a TrainingArguments field: the post's loop uses torch.cuda.amp.autocast() and "
                           "torch.cuda.amp.GradScaler()"),),
        knob_torch="with torch.cuda.amp.autocast(): ...; scaler = torch.cuda.amp.GradScaler()",
        baseline="the same loop without autocast / GradScaler", variant="the post's torch.cuda.amp loop",
        memory=_per_target(
            cpu=no_claim(f"the {M3_POST} makes its claim for a Mac"),
            cuda=no_claim(f"the {M3_POST} makes its claim for a Mac"),
            mps=lower(ANY_REDUCTION, f"{M3_POST}: {zh('同时减少显存使用', 'while also reducing GPU memory use')}, as "
                      "the post states it; " + ANY_REDUCTION_SRC, "peak")),
        time=_per_target(
            cpu=no_claim(f"the {M3_POST} makes its claim for a Mac"),
            cuda=no_claim(f"the {M3_POST} makes its claim for a Mac"),
            mps=lower(ANY_REDUCTION, f"{M3_POST}: {zh('来加速训练过程', 'to speed up training')}, as the post states "
                      "it; " + ANY_REDUCTION_SRC, "per-sample")),
        tolerance=SLACK_DEFAULT,
        gates=(
            _never(("cpu", "cuda"), f"the {M3_POST} makes this claim for a Mac (MacBook M3) only",
                   "see fp16-autocast / bf16-autocast for these targets",
                   f"{M3_POST}: {zh('在 MacBook 上使用 M3 芯片', 'using the M3 chip on a MacBook')}"),
        ),
        notes="Expected not to hold: on a Mac CUDA is unavailable, torch.cuda.amp.autocast warns and disables itself "
              "and GradScaler disables itself, so nothing runs in half precision (DESIGN.md). The table records "
              "the claim as stated; the suite shows what it does. The working equivalent is "
              "torch.autocast('mps', dtype=torch.float16) (fp16-autocast).",
    ),
)


# --------------------------------------------------------------------------- where each is measured

LOOP, TRAINER = "loop", "trainer"
# Every check of the optimization suite: (claim, quantity, entry) -> None, measured there, or
# a Known: the check exists and is skipped for its reason. Entry LOOP is the plain-PyTorch
# loop (harness/optim/techniques.py), one check per claim x quantity, optim/<claim>/<quantity>.
# Entry TRAINER is transformers' Trainer with the documented TrainingArguments flags
# (harness/optim/trainer_runs.py), optim/<claim>/<quantity>/trainer: every memory claim whose
# knob is a TrainingArguments flag, and the time claims only the Trainer can turn (DataLoader
# workers, pinned memory). The other time claims are the loop's: a train() call is seconds
# of setup around two steps, so interleaved rounds of it would cost minutes per claim on a
# 2-core CPU. The suite's cases (CASES, below) are built from this table.
_LOOP_FEEDS = "harness/optim/workloads.py: the loop steps over batches it built, with no DataLoader"
_NOT_IN_LOOP = {
    "dataloader-workers": Known("skip", "not measured by the plain-PyTorch loop: a DataLoader claim: measured through "
                                "the Trainer (optim/dataloader-workers/time/trainer)", _LOOP_FEEDS),
    "pin-memory": Known("skip", "not measured by the plain-PyTorch loop: a DataLoader claim: measured through the "
                        "Trainer (optim/pin-memory/time/trainer)", _LOOP_FEEDS),
    "deepspeed-zero": Known("skip", "not measured by the plain-PyTorch loop: applicability only (the claims table "
                            "says so)", "claims table: deepspeed-zero makes no memory or time claim"),
}
WHERE_MEASURED: Mapping[tuple[str, str, str], Known | None] = MappingProxyType({
    **{(c.name, q, LOOP): _NOT_IN_LOOP.get(c.name) for c in CLAIMS for q in QUANTITIES},
    **{(name, "memory", TRAINER): None for name in (
        "gradient-accumulation", "gradient-checkpointing", "adafactor", "adamw-8bit", "fused-adamw",
        "fp16-autocast", "bf16-autocast", "dynamic-padding")},
    **{(name, "time", TRAINER): None for name in ("dataloader-workers", "pin-memory")},
})


# --------------------------------------------------------------------------- lookups

_BY_NAME = {c.name: c for c in CLAIMS}
assert len(_BY_NAME) == len(CLAIMS), "claim names must be unique"


def by_name(name: str | None = None):
    """The claim called ``name``; without a name, the whole table as a dict."""
    if name is None:
        return dict(_BY_NAME)
    return _BY_NAME[name]


def expected_ratio(claim: Claim | str, quantity: str, target_class: str, **setup: float) -> float | None:
    """The claimed bound on variant / baseline for a quantity and target; None: no claim.
    A ratio with a ``scale`` is multiplied by that setup quantity (e.g. trainable_fraction=0.02)."""
    claim = by_name(claim) if isinstance(claim, str) else claim
    e = claim.expect(quantity)[target_class]
    if e.kind == ClaimKind.NONE:
        return None
    if e.scale:
        if e.scale not in setup:
            raise KeyError(f"{claim.name}: the {quantity} ratio scales with {e.scale}; pass {e.scale}=...")
        return e.ratio * float(setup[e.scale])
    return e.ratio


def slack(claim: Claim | str, quantity: str) -> float:
    claim = by_name(claim) if isinstance(claim, str) else claim
    return getattr(claim.tolerance, quantity)


def holds_bound(claim: Claim | str, quantity: str, target_class: str, **setup: float) -> float | None:
    """The largest measured ratio that still counts as "holds": the claimed ratio loosened by
    the claim's slack; a "lower" claim is never loosened past 1.0. None: no claim."""
    claim = by_name(claim) if isinstance(claim, str) else claim
    r = expected_ratio(claim, quantity, target_class, **setup)
    if r is None:
        return None
    bound = r * (1.0 + slack(claim, quantity))
    if claim.expect(quantity)[target_class].kind == ClaimKind.LOWER:
        bound = min(bound, 1.0)
    return bound


def trainer_kwargs(claim: Claim | str, fields: set[str] | None = None) -> dict:
    """TrainingArguments kwargs for a claim: the first alternative whose fields all exist in
    ``fields`` (default: the installed TrainingArguments). Empty when the technique is not a
    TrainingArguments field (see knob_trainer[...].note)."""
    claim = by_name(claim) if isinstance(claim, str) else claim
    if fields is None:
        from transformers import TrainingArguments
        fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    for knob in claim.knob_trainer:
        if all(k in fields for k, _ in knob.args):
            return knob.kwargs()
    raise LookupError(f"{claim.name}: none of {[k.kwargs() for k in claim.knob_trainer]} exists in this "
                      "TrainingArguments")


# --------------------------------------------------------------------------- when a claim applies

# Packages the gates ask about, looked up again where a fact set lacks them: harness/env/facts.py
# records peft and bitsandbytes (PACKAGES) from this project's run headers of December 2026 on,
# not deepspeed or optimum, and a recorded fact set from before has none of them.
EXTRA_PACKAGES = ("bitsandbytes", "peft", "deepspeed", "optimum")


def extra_package_versions() -> dict[str, str | None]:
    """Versions of EXTRA_PACKAGES in this environment (None: not installed)."""
    return package_versions(EXTRA_PACKAGES)


def with_extra_packages(facts: dict) -> dict:
    """This process's fact set plus the packages the gates ask about (a copy). Use it on live
    facts only: a recorded fact set must carry its own package versions."""
    return {**facts, "packages": {**extra_package_versions(), **(facts.get("packages") or {})}}


def gate_facts(target: str, live: dict) -> dict:
    """The fact set a target's gates are judged by: this process's (with EXTRA_PACKAGES); for
    an emulated device (harness.env.devices.facts_for: the emulated Mac) its recorded
    machine, macOS and device, with this environment's packages and CPU put in, since the
    code that runs and the cores it runs on are this machine's."""
    live = with_extra_packages(live)
    recorded = devices.facts_for(target, live)
    if recorded is live:
        return live
    return {**recorded, "packages": {**(recorded.get("packages") or {}), **live["packages"]},
            "cpu": live.get("cpu") or recorded.get("cpu")}


def cuda_capability(facts: dict) -> tuple[int, int] | None:
    """The compute capability of the fact set's first CUDA device, or None when it records none."""
    devices = (facts.get("torch") or {}).get("cuda_devices") or []
    if not devices:
        return None
    major, minor = devices[0]["capability"]
    return int(major), int(minor)


def gap(gate: Gate, facts: dict) -> str | None:
    """What the fact set lacks for this gate, or None when it passes."""
    if gate.never:
        return "not applicable"
    tv = fitness.torch_version(facts)
    if gate.torch:
        pv = fitness.version_of((facts.get("python") or {}).get("version"))
        concerned = gate.when_python is None or (pv is not None and pv >= Version(gate.when_python))
        if concerned and not fitness.has_feature(tv, gate.torch):   # a nightly of the release has it
            py = f" on Python {pv}" if gate.when_python else ""
            return f"this is torch {tv or 'not installed'}{py}"
    if gate.macos:
        mv = fitness.macos_version(facts)
        if not fitness.has_feature(mv, gate.macos):
            return f"this is macOS {mv or 'not available'}"
    if gate.facts_gate:
        gaps = fitness.gate_gaps(fitness.GATES[gate.facts_gate], facts)
        if gaps:
            return "needs " + " and ".join(gaps)
    if gate.package:
        packages = facts.get("packages") or {}
        if gate.package not in packages:
            return (f"{gate.package} is not recorded in these facts (harness/env/facts.py PACKAGES); "
                    "pass live facts through claims.with_extra_packages()")
        pv = fitness.version_of(packages[gate.package])
        if pv is None:
            return f"{gate.package} is not installed"
        if gate.package_min and not fitness.has_feature(pv, gate.package_min):
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


def applies(claim: Claim | str, target: str, facts: dict, via: str = "trainer") -> tuple[bool, str]:
    """Whether a claim can be checked on ``target`` in the environment ``facts`` describes,
    with a reason a user can act on. ``via``: "trainer" (the TrainingArguments knob) or
    "torch" (the plain-PyTorch equivalent). The target's own availability (is there an MPS
    device at all) is harness.env.devices' question, not this one."""
    claim = by_name(claim) if isinstance(claim, str) else claim
    assert target in TARGET_CLASSES, target
    assert via in ("trainer", "torch"), via
    for gate in claim.gates:
        if target not in gate.targets or gate.via not in ("both", via):
            continue
        missing = gap(gate, facts)
        if missing is not None:
            detail = "" if gate.never else f" ({missing})"
            return False, f"{claim.name} on {target}: {gate.reason}{detail}. Fix: {gate.fix}"
    return True, f"{claim.name} applies on {target}"


# --------------------------------------------------------------------------- the suite's cases


class ClaimCase:
    """One claim x quantity through one entry point (LOOP or TRAINER), of the shape
    harness.core.cases.Case. The journal names it ``optim/<claim>/<quantity>`` (the
    plain-PyTorch loop) or ``optim/<claim>/<quantity>/trainer`` (through the Trainer); its
    pytest id is ``<claim>-<quantity>`` or ``<claim>-<quantity>-trainer``. ``known`` is what
    the table knows before it runs: None (measured) or a ``Known("skip", ...)``."""

    def __init__(self, claim: str, quantity: str, entry: str = LOOP, known: Known | None = None):
        if known is not None and known.outcome != "skip":
            raise ValueError(f"optim/{claim}/{quantity}: only a skip is known before a claim runs "
                             f"(a claim that does not hold is already an expected failure), not {known.outcome!r}")
        trainer = entry == TRAINER
        self.subject, self.variant = claim, f"{quantity}/{entry}" if trainer else quantity
        self.quantity, self.entry, self.known = quantity, entry, known
        self.id = f"{claim}-{quantity}" + (f"-{entry}" if trainer else "")

    @property
    def targets(self) -> tuple[str, ...]:
        """The target classes, and every registered stand-in that emulates one of them (the
        emulated Mac measures what ``mps`` does): read when the suite collects, after the
        stand-ins' plugin has registered them."""
        emulating = tuple(name for name in devices.STAND_INS
                          if devices.is_emulated(name) and devices.rules_of(name) in TARGET_CLASSES)
        return TARGET_CLASSES + emulating

    @property
    def claim(self) -> Claim:
        return by_name(self.subject)

    def expect(self, target: str) -> Expect:
        return self.claim.expect(self.quantity)[target]

    @property
    def document(self) -> str:
        """The title of the document the claim comes from (never its file name)."""
        return documents.title(self.claim.source)

    def metrics(self, target: str) -> dict:
        """What every record of this check says, measured or not: the claim's source, basis and
        kind, the document it comes from (by title) and its words (glossed: the original with
        its English beside it)."""
        expect = self.expect(target)
        entry = {"entry": TRAINER} if self.entry == TRAINER else {}
        return {"source": expect.source or self.document, "basis": expect.basis, "kind": expect.kind,
                "document": self.document, "quote": quoted(self.claim), **entry}

    def not_measured(self, target: str, facts: dict) -> Verdict | None:
        """Why this check is not measured on ``target`` (a skip Verdict), or None when it is:
        the document makes no claim there (said with the table's cause, the no-claim
        Expect's source, and the reason and fix of a gate that keeps the technique away there
        too), a gate keeps the technique away (a package, a torch or macOS version, a device
        capability), or the table says it is measured elsewhere (``known``)."""
        claim = self.claim
        expect = self.expect(target)
        if expect.kind == ClaimKind.NONE:   # with the table's why, and a gate's reason and fix where one keeps it away
            via = "trainer" if self.entry == TRAINER else "torch"
            ok, why = applies(claim, target, facts, via=via)
            gated = "" if ok else f" {why}"
            return Verdict(Status.SKIP, message=f"{self.document} makes no {self.quantity} claim for {target} "
                                                f"({claim.technique}): {expect.source.rstrip('.')}.{gated}")
        return not_applicable(claim, target, facts, via="trainer" if self.entry == TRAINER else "torch") or (
            Verdict(Status.SKIP, message=self.known.reason) if self.known is not None else None)


def not_applicable(claim: Claim | str, target: str, facts: dict, via: str) -> Verdict | None:
    """A skip Verdict with the reason a user can act on when a gate keeps ``claim`` away from
    ``target`` (``applies``); None when it applies."""
    ok, why = applies(claim, target, facts, via=via)
    return None if ok else Verdict(Status.SKIP, message=why)


def cases(entry: str) -> list[ClaimCase]:
    """The cases measured through ``entry``, in the claims table's order."""
    return [ClaimCase(name, quantity, where, known)
            for (name, quantity, where), known in WHERE_MEASURED.items() if where == entry]


CASES = cases(LOOP) + cases(TRAINER)
