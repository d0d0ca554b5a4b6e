"""Training workloads for the optimization claims: one setup, built and stepped on a device.

A ``Setup`` is the plain-PyTorch form of a training configuration: the model size, the
batch, the sequence length, and the knobs the documents talk about (gradient accumulation,
checkpointing, the optimizer, autocast, freezing the backbone, the attention kernel,
LoRA, torch.compile, dynamic padding). ``Workload(setup, device)`` builds it, seeded, and
``step()`` runs one optimizer step over ``setup.batch`` samples (in ``grad_accum``
micro-batches). harness.optim.measure weighs and times it; nothing here measures.

Model sizes: a BERT-style sequence classifier (seed 003 trains chinese-macbert-large).
``macbert-large`` is that model's shape (hfl/chinese-macbert-large's config: hidden 1024,
24 layers, 16 heads, intermediate 4096, vocabulary 21128), for a Mac. ``bert-small`` keeps
what makes the seed's ratios meaningful, activations that outweigh the weights, gradients
and optimizer state at the baseline batch (macbert-large at batch 32, length 128: about
10 of 15 GB), at a size a 2-core CPU steps in about a second: a small vocabulary, since a
21128-row embedding would make the weights dominate. ``bert-base`` (BERT-base's shape with
the seed's vocabulary) is the step between them, for a Mac. ``tiny`` is for self-tests.

``--workload auto``: the training shape at which the optimization claims mean something here.
A claim about a training technique is a claim about a step whose time goes into arithmetic
and whose memory goes into activations. Measured on a step too short, a GPU reports its
kernel-launch overhead (on an H100, bert-small at batch 16 made fp16 autocast *slower*,
ratio 1.24, while macbert-large at batch 32 gave 0.41); measured on a shape too big, the
suite does not finish or does not fit. So the shape is chosen per device from two readings
taken on it (``probe``):

* its memory (harness.env.devices.memory_of): free memory on CUDA, the Metal working-set
  limit on MPS, and on the CPU the available RAM, capped so a big server does not train a
  large model on its CPU;
* its float32 matmul throughput, timed on the device (``n x n`` matmuls, the median).

``choose`` walks the ladder of named workloads (``LADDER``, smallest first) and takes the
first whose estimated step lasts at least ``MIN_STEP_S`` (launch overhead then stays a
small part of it), provided its estimated memory fits in ``MEMORY_FRACTION`` of the
device's and its step stays under ``MAX_STEP_S`` (the time budget); where none is long
enough, the largest that fits. The estimates (``estimate``) are arithmetic on the model's
config, not measurements:

* step FLOPs: 6 x non-embedding parameters x tokens (forward 2, backward 4; Kaplan et al.
  2020, "Scaling Laws for Neural Language Models", sec. 2.1) plus attention's
  12 x layers x batch x length^2 x hidden;
* memory: 16 bytes per parameter (float32 weights, gradients and AdamW's two moments) plus
  activations of ``length x batch x hidden x (34 + 5 x heads x length / hidden)`` bytes
  per layer at 16 bits (Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", sec. 4.1), doubled for float32.

The step-time estimate divides by the peak matmul rate, so it is a lower bound of the real
step: the choice errs towards the larger, more meaningful shape.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from harness.env import devices

PRESETS = {
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 512},
    "bert-small": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "intermediate_size": 1024, "vocab_size": 2000},
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                  "vocab_size": 21128},
    "macbert-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                      "intermediate_size": 4096, "vocab_size": 21128},
}
OPTIMIZERS = ("adamw", "adamw-single", "adamw-foreach", "adamw-fused", "adafactor", "adamw-8bit")
LR = 1e-4
SEED = 0


@dataclasses.dataclass(frozen=True)
class Setup:
    model: str = "bert-small"
    batch: int = 8                 # samples per optimizer step
    seq: int = 64                  # max length (padding="max_length")
    grad_accum: int = 1            # micro-batches per optimizer step (batch / grad_accum samples each)
    checkpointing: bool = False    # model.activation_checkpointing_enable() (gradient_... before 5.x)
    optimizer: str = "adamw"       # torch's default AdamW for the device (foreach on CUDA); see OPTIMIZERS
    autocast: str | None = None    # "float16" (+ GradScaler) | "bfloat16" | "cuda-amp" (seed 000's torch.cuda.amp loop)
    tf32: bool = False             # CUDA: TF32 matmuls and convolutions
    freeze_backbone: bool = False  # train the classifier head only
    attn: str = "sdpa"             # "sdpa" | "eager"
    lora: bool = False             # peft LoRA on query/value, rank 8
    compile: bool = False          # torch.compile(model) (counted_backend: inductor, its graph calls counted)
    dynamic_padding: bool = False  # pad each micro-batch to its longest sequence, not to seq
    dropout: bool = True           # BERT's dropout (off when two setups' numbers are compared)

    def but(self, **changes) -> "Setup":
        return dataclasses.replace(self, **changes)

    @property
    def micro_batch(self) -> int:
        if self.batch % self.grad_accum:
            raise ValueError(f"batch {self.batch} is not a multiple of grad_accum {self.grad_accum}")
        return self.batch // self.grad_accum


# Workload scales: ``small`` (``bert-small``, batch 16, length 64, sized for a 2-core CPU),
# ``medium`` (``bert-base``, batch 32, length 128) and ``large`` (seed 003's shape: the
# macbert-large model at batch 32, length 128). ``--workload auto`` (the default) picks one
# per device: harness/optim/workloads.py.
SCALES = {
    "small": Setup(model="bert-small", batch=16, seq=64),
    "medium": Setup(model="bert-base", batch=32, seq=128),
    "large": Setup(model="macbert-large", batch=32, seq=128),
}
TIME_BUDGET_S = {"small": 20.0, "medium": 60.0, "large": 120.0}   # extra rounds while a time verdict is undecided
TIME_ROUNDS = {"small": 6, "medium": 8, "large": 10}             # interleaved rounds before the first verdict


KEEP_WEIGHTS = 2   # model sizes whose initial weights a process keeps (tiny's and the workload's)
_WEIGHTS: dict[tuple, dict] = {}


def _config(setup: Setup):
    from transformers import BertConfig
    if setup.model not in PRESETS:
        raise ValueError(f"unknown model size {setup.model!r}; known: {', '.join(PRESETS)}")
    no_dropout = {} if setup.dropout else {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    # problem_type is what the model's first forward would set for two labels given as integers
    # (BertForSequenceClassification.forward writes it into the config when it is None): set
    # here, a compiled model is not recompiled on its second call for that write (a guard on it).
    return BertConfig(**PRESETS[setup.model], max_position_embeddings=512, num_labels=2,
                      problem_type="single_label_classification", attn_implementation=setup.attn, **no_dropout)


def initial_weights(setup: Setup) -> dict:
    """The seeded initial parameters and buffers of ``setup``'s model, by name, on the CPU: made
    once per model size (their values depend on the sizes, the seed, the default dtype and the
    torch release, not on the attention kernel or the dropout) and kept for the next model of
    that size (KEEP_WEIGHTS). Initialising macbert-large's 325M parameters takes seconds on a
    CPU, and the optimization suite builds about thirty models in a run; copying kept weights
    takes a fraction of one (benchmarks/optim_build.py).

    Call it outside a target's context (``devices.on_device``): weights kept across checks are
    the process's, not the device's, and an emulated device counts what is made inside its
    context as its own memory."""
    import torch
    from transformers import BertForSequenceClassification
    key = (tuple(sorted(PRESETS.get(setup.model, {}).items())), setup.model, str(torch.get_default_dtype()),
           torch.__version__, BertForSequenceClassification)
    weights = _WEIGHTS.pop(key, None)
    if weights is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            model = BertForSequenceClassification(_config(setup.but(attn="eager", dropout=True)))
        weights = {name: t.detach() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    _WEIGHTS[key] = weights   # the most recent last
    while len(_WEIGHTS) > KEEP_WEIGHTS:
        del _WEIGHTS[next(iter(_WEIGHTS))]
    return weights


def forget_weights() -> None:
    """Drop every kept set of initial weights (the next model is initialised again)."""
    _WEIGHTS.clear()


def build_model(setup: Setup, device: str = "cpu"):
    """The classifier for ``setup`` on ``device`` (where its tensors live), weights seeded: the
    same values a model made with ``torch.manual_seed(SEED)`` has, copied from
    ``initial_weights`` into a model made without initialising it (the caller's RNG state is
    kept)."""
    import itertools

    import torch
    from transformers import BertForSequenceClassification
    config = _config(setup)
    weights = initial_weights(setup)
    with torch.device("meta"):   # shapes only: the values come from the kept weights
        model = BertForSequenceClassification(config)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, t in itertools.chain(model.named_parameters(), model.named_buffers()):
            t.copy_(weights[name])
    if setup.checkpointing:
        # the documents' gradient_checkpointing_enable() is a deprecated alias from transformers 5.x
        # (removed in v6, it says): the new name where there is one
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if setup.freeze_backbone:
        for p in model.bert.parameters():
            p.requires_grad_(False)
    if setup.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"],
                                                 task_type="SEQ_CLS"))
    return model


def build_optimizer(setup: Setup, params):
    import torch
    params = [p for p in params if p.requires_grad]
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=LR)
    if setup.optimizer == "adamw-single":   # one parameter at a time: no temporaries for all at once
        return torch.optim.AdamW(params, lr=LR, foreach=False)
    if setup.optimizer == "adamw-foreach":  # CUDA's default, forced on any device
        return torch.optim.AdamW(params, lr=LR, foreach=True)
    if setup.optimizer == "adamw-fused":
        return torch.optim.AdamW(params, lr=LR, fused=True)
    if setup.optimizer == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=LR, scale_parameter=False, relative_step=False, warmup_init=False)
    if setup.optimizer == "adamw-8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=LR)
    raise ValueError(f"unknown optimizer {setup.optimizer!r}; known: {', '.join(OPTIMIZERS)}")


def make_batches(setup: Setup, count: int, device) -> list[dict]:
    """``count`` micro-batches of token ids, seeded. Sentence lengths vary (a quarter to all
    of ``seq``) so that dynamic padding has something to cut; with it, each micro-batch is
    padded to its longest sentence instead of to ``seq``."""
    import torch
    vocab = PRESETS[setup.model]["vocab_size"]
    gen = torch.Generator().manual_seed(SEED + 1)
    out = []
    for _ in range(count):
        lengths = torch.randint(max(1, setup.seq // 4), setup.seq + 1, (setup.micro_batch,), generator=gen)
        width = int(lengths.max()) if setup.dynamic_padding else setup.seq
        ids = torch.randint(3, vocab, (setup.micro_batch, width), generator=gen)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        labels = torch.randint(0, 2, (setup.micro_batch,), generator=gen)
        out.append({k: v.to(device) for k, v in
                    {"input_ids": ids * mask, "attention_mask": mask, "labels": labels}.items()})
    return out


class Workload:
    """A built setup on a target: ``step()`` is one optimizer step.

    ``target`` is where the check runs ("cpu", "cuda", "cuda:0", "mps", or a stand-in);
    ``device`` is where its tensors live (harness.env.devices.place: the CPU for a
    stand-in). The model, its optimizer state and the batches are made, and every step is
    taken, inside the target's context (devices.on_device): an emulated device sees them
    as its own, as a real one would after ``.to(device)``. The kept initial weights the model
    is copied from are drawn before, outside it (``initial_weights``).

    float16 autocast trains with a GradScaler (``grad_scaler``), as the claim's knob and
    ``Trainer(fp16=True)`` do. A compiled setup compiles through ``counted_backend``, its calls
    of compiled graphs counted in ``graph_calls`` (``require_compiled``); on an emulated device
    it is refused with BeyondEmulation (``compile_beyond_emulation``): nothing compiles there."""

    def __init__(self, setup: Setup, device: str):
        import torch
        self.setup, self.target, self.device = setup, device, devices.place(device)
        if setup.compile and devices.is_emulated(device):   # before anything is built: skipped, with why
            raise devices.BeyondEmulation(compile_beyond_emulation(device))
        initial_weights(setup)   # the process's, made outside the target's context (an emulated device's own otherwise)
        with devices.on_device(self.target):
            self.model = build_model(setup, self.device)
            self.model.train()
            self.optimizer = build_optimizer(setup, self.model.parameters())
            self._compiled = Compiled(self.model) if setup.compile else None
            self.forward = self._compiled or self.model
            self.batches = make_batches(setup, setup.grad_accum, self.device)
        self.scaler = None
        if setup.autocast == "cuda-amp":  # the seed's code, verbatim in spirit: CUDA's AMP on any device
            self._autocast, self.scaler = _cuda_amp()
        elif setup.autocast:
            device_type = self.device.split(":")[0]
            self._autocast = torch.autocast(device_type, dtype=getattr(torch, setup.autocast))
            if setup.autocast == "float16":   # float16 trains with loss scaling, as Trainer(fp16=True) does
                self.scaler = grad_scaler(device_type, devices.rules_of(device).split(":")[0])
        else:
            self._autocast = None

    @property
    def graph_calls(self) -> int:
        """Calls of graphs torch.compile compiled, made by this workload's compiled model (0 uncompiled)."""
        return self._compiled.graph_calls if self._compiled is not None else 0

    def resident(self) -> dict[str, list]:
        """What lives between steps, by harness.optim.measure category (``resident_of``)."""
        return resident_of(self.model, self.optimizer, self.batches)

    def step(self, tracker=None, micro_batches: int | None = None) -> Any:
        """Forward and backward over each micro-batch, then one optimizer step. A
        harness.optim.measure tracker, when given, is told the phase (forward, backward, optimizer)
        and what the step creates (activations, gradients, optimizer state). ``micro_batches``:
        the first that many micro-batches only (the rest stay resident), for the memory
        measurement of an accumulated step (harness.optim.measure.weigh_micro_batches)."""
        total = self.step_without_update(tracker, micro_batches)
        with devices.on_device(self.target):
            if tracker is not None:
                tracker.mark("optimizer")
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            if tracker is not None:
                tracker.label("optimizer_state", [self.optimizer.state])
            self.optimizer.zero_grad(set_to_none=True)
        return total

    def optimizer_step(self) -> None:
        """``optimizer.step()`` alone, on the target (the optimizer-step time basis)."""
        with devices.on_device(self.target):
            self.optimizer.step()

    def step_without_update(self, tracker=None, micro_batches: int | None = None) -> float:
        """Forward and backward over each micro-batch (the first ``micro_batches``; all when
        None): the gradients, no optimizer step."""
        import torch
        total = 0.0
        saved = contextlib.nullcontext
        if tracker is not None and not self.setup.compile:  # compiled graphs save tensors their own way
            def saved():
                return torch.autograd.graph.saved_tensors_hooks(activations_labeller(tracker), lambda t: t)
        with devices.tf32(self.setup.tf32), devices.on_device(self.target):  # this setup's switches, its step only
            for batch in self.batches[:micro_batches]:
                if tracker is not None:
                    tracker.mark("forward")
                with self._autocast or contextlib.nullcontext(), saved():
                    loss = self.forward(**batch).loss / self.setup.grad_accum
                if tracker is not None:
                    tracker.mark("backward")
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
                if tracker is not None:
                    tracker.label("gradients", [p.grad for p in self.model.parameters() if p.grad is not None])
                total += float(loss.detach())
        return total

    def trainable_fraction(self) -> float:
        params = list(self.model.parameters())
        return sum(p.numel() for p in params if p.requires_grad) / sum(p.numel() for p in params)


# --------------------------------------------------------------------------- built once, reused by the claims

KEEP_BUILT = 3   # built workloads kept in a sandbox child: a claim's two sides and one more


def settings() -> tuple:
    """The process-wide torch settings a step's cost and memory depend on, beyond its setup
    and its target: the version, threads, default dtype, float32 matmul precision, the TF32,
    cuDNN and determinism switches, and the MPS fallback. Part of every cache key here, so
    nothing measured or built under one set of them is reused under another."""
    import os

    import torch
    cudnn = torch.backends.cudnn
    return (torch.__version__, torch.get_num_threads(), str(torch.get_default_dtype()),
            torch.get_float32_matmul_precision(), bool(torch.backends.cuda.matmul.allow_tf32),
            bool(cudnn.allow_tf32), bool(cudnn.benchmark), bool(cudnn.deterministic),
            torch.are_deterministic_algorithms_enabled(), os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK"))


def key_of(setup: Setup, device: str) -> tuple:
    """What a built workload, or anything measured on one, is keyed by: the setup, the target,
    where its tensors live, the torch settings (``settings``) and the functions that build it
    (a test that swaps one in gets workloads of its own)."""
    return (setup, device, devices.place(device), settings(), build_model, build_optimizer, make_batches)


_BUILT: dict[tuple, "Workload"] = {}


def built(setup: Setup, device: str) -> "Workload":
    """The workload of ``setup`` on ``device``, built once and kept while it is among the
    KEEP_BUILT last used (in a sandbox child, across checks): the claims of one workload share
    their sides (the path's rows, the baseline) instead of building and warming each again.
    Its model has taken steps by then; a step's cost and peak do not depend on how many (the
    optimizer state exists from the first), and neither side of a ratio is judged by its
    weights."""
    key = key_of(setup, device)
    w = _BUILT.pop(key, None)
    if w is None:
        w = Workload(setup, device)
    _BUILT[key] = w   # the most recent last
    while len(_BUILT) > KEEP_BUILT:
        del _BUILT[next(iter(_BUILT))]
    return w


def keep_only(*kept: "Workload") -> None:
    """Let go of every kept workload but ``kept`` (what a device allocator reads while they
    are measured is then theirs, as when a claim builds its two sides alone)."""
    for key, w in list(_BUILT.items()):
        if not any(w is mine for mine in kept):
            del _BUILT[key]


def forget_built() -> None:
    """Drop every kept workload (their memory goes back to the device's allocator)."""
    _BUILT.clear()


def resident_of(model, optimizer=None, batches=None) -> dict[str, list]:
    """What lives between training steps, by harness.optim.measure category: the trainable
    parameters, the rest of the weights with the buffers, the optimizer state, the batches."""
    params = list(model.parameters())
    out = {"parameters": [p for p in params if p.requires_grad],
           "buffers": [p for p in params if not p.requires_grad] + list(model.buffers())}
    if optimizer is not None:
        out["optimizer_state"] = [optimizer.state]
    if batches is not None:
        out["batch"] = [batches]
    return out


def activations_labeller(tracker):
    """A saved-tensors pack hook that files what autograd keeps for backward as activations."""
    def pack(t):
        tracker.label("activations", t)
        return t
    return pack


def _cuda_amp():
    """Seed 000's mixed precision: ``torch.cuda.amp.autocast()`` and ``GradScaler()``. Without
    CUDA (on a Mac) torch warns and disables both: the loop runs in float32 as before."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation and "CUDA is not available" warnings
        amp = getattr(torch.cuda, "amp", None)
        if amp is not None and hasattr(amp, "autocast") and hasattr(amp, "GradScaler"):
            return amp.autocast(), amp.GradScaler()
        return torch.autocast("cuda"), torch.amp.GradScaler("cuda")


def grad_scaler(device_type: str, rules: str):
    """``torch.amp.GradScaler(device_type)``: the loss scaling float16 autocast trains with (the
    fp16-autocast claim's knob, and what ``Trainer(fp16=True)`` builds). ``rules``: the device
    whose versions apply (the emulated Mac's are MPS's). Raises, with the version to install,
    where this torch has no scaler that steps there (harness.parity.models.precision.SCALER_SINCE:
    MPS from torch 2.8; ``torch.amp.GradScaler`` itself from 2.3, CUDA's before it)."""
    import torch

    from harness.env import fitness
    from harness.parity.models.precision import scaler_unsupported
    why = scaler_unsupported(rules, torch.__version__)
    if why:
        raise RuntimeError(why)
    if fitness.has_feature(torch.__version__, "2.3"):
        return torch.amp.GradScaler(device_type)
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler()
    raise RuntimeError(f"torch.amp.GradScaler({device_type!r}) arrived in torch 2.3 and this is torch "
                       f"{torch.__version__}: upgrade torch to train in float16 with loss scaling, or train under "
                       "bfloat16 autocast, which needs no scaler")


# --------------------------------------------------------------------------- a compiled side that ran compiled

COMPILE_BACKEND = "inductor"   # what torch.compile(model) compiles with (a self-test names a cheaper one)
_GRAPH_CALLS = [0]             # calls of graphs counted_backend compiled, in this process


def counted_backend(gm, example_inputs):
    """torch.compile's backend (COMPILE_BACKEND: inductor, torch.compile's default), with every
    call of a graph it compiled counted (``Workload.graph_calls``). A compiled side whose steps
    called no compiled graph ran eager: Dynamo skips every frame while a TorchDispatchMode is
    on the stack (an emulated device's context), with ``torch._dynamo.config.disable`` or
    TORCHDYNAMO_DISABLE=1, and on a Python its release does not support. Counting calls, not
    the graphs captured (``counters["stats"]["unique_graphs"]``), also sees a model that reuses
    the graph another instance of its class captured, which captures none of its own."""
    from torch._dynamo import lookup_backend
    compiled = lookup_backend(COMPILE_BACKEND)(gm, example_inputs)

    def run(*args):
        _GRAPH_CALLS[0] += 1
        return compiled(*args)
    run._boxed_call = getattr(compiled, "_boxed_call", False)   # the calling convention Dynamo calls it by
    return run


class Compiled:
    """``torch.compile(model)`` through ``counted_backend``, called as the model is, counting the
    compiled graphs its own calls called (``graph_calls``): whoever calls it (a step, a test's
    replacement step), a call that ran eager adds nothing."""

    def __init__(self, model):
        import torch
        self.module = torch.compile(model, backend=counted_backend)
        self.graph_calls = 0

    def __call__(self, *args, **kwargs):
        before = _GRAPH_CALLS[0]
        try:
            return self.module(*args, **kwargs)
        finally:
            self.graph_calls += _GRAPH_CALLS[0] - before


class NothingCompiled(RuntimeError):
    """A compiled side ran no compiled graph: comparing it with eager says nothing of torch.compile."""


def compile_beyond_emulation(target: str) -> str:
    """Why torch.compile is not measured on an emulated ``target``, in the parity suite's words
    (harness.parity.compiled.unsupported)."""
    kind = devices.rules_of(target)
    where = "a Mac" if kind == "mps" else f"a real {kind} device"
    return (f"{target} emulates {kind} on this CPU at the dispatcher, where torch.compile captures no graph (Dynamo "
            f"skips every frame while the emulation's dispatch mode is on) and would generate CPU code for it "
            f"anyway, not {kind}'s kernels: nothing of {kind}'s compiled training would be checked; run the "
            f"torch-compile checks on {where}")


def require_compiled(w: "Workload", before: int = 0) -> None:
    """Raise NothingCompiled, with the cause and the switch, where ``w`` is compiled and its steps
    called no compiled graph since it had made ``before`` such calls: its "compiled" side ran eager."""
    if w.setup.compile and w.graph_calls <= before:
        raise NothingCompiled(
            f"torch.compile ran no compiled graph on {w.target}: the compiled side's steps ran eager, so comparing "
            "it with eager says nothing of torch.compile, and it is not judged. Dynamo captures nothing while a "
            "TorchDispatchMode is on the stack, with torch._dynamo.config.disable or TORCHDYNAMO_DISABLE=1 set, or "
            "on a Python this torch does not compile for: leave those off (TORCH_LOGS=dynamo says why it skipped "
            "the frames)")


# --------------------------------------------------------------------------- --workload auto: the shape a device gets

GIB = devices.GIB
LADDER = ("small", "medium", "large")
MIN_STEP_S = 0.1          # a BERT step launches ~100 kernels per layer at ~10 us (CUDA) to tens of us (MPS) each
MAX_STEP_S = 2.0          # the optimization suite runs ~60 measured steps per claim and side
MEMORY_FRACTION = 0.5     # of the device's memory reading: room for the other side and the allocator's cache


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What ``probe`` read on a device (a stand-in may report another device's figures)."""
    device: str
    memory_bytes: int
    memory_source: str
    flops: float              # float32 matmul FLOP/s
    flops_source: str


def estimate(setup: Setup) -> dict:
    """Parameters, step FLOPs, the step time at ``flops`` 1 (seconds per FLOP/s), and the
    training memory of ``setup`` (float32, AdamW), from the model's config alone."""
    c = PRESETS[setup.model]
    h, layers, heads, inner, vocab = (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                                      c["intermediate_size"], c["vocab_size"])
    per_layer = 4 * h * h + 4 * h + 2 * h * inner + h + inner + 4 * h   # attention, MLP, two LayerNorms
    body = layers * per_layer + h * h + h + 2 * h + 2                    # + pooler and classifier
    embeddings = (vocab + 512 + 2) * h + 2 * h
    tokens = setup.batch * setup.seq
    flops = 6 * body * tokens + 12 * layers * setup.batch * setup.seq ** 2 * h
    activations = 2 * layers * setup.seq * setup.batch * h * (34 + 5 * heads * setup.seq / h)
    params = body + embeddings
    return {"params": params, "step_flops": flops, "memory_bytes": int(16 * params + activations)}


def choose(capacity: Capacity, scales: dict[str, Setup] | None = None, ladder=LADDER) -> dict:
    """The named workload for ``capacity``: ``{"name", "setup", "reason", "candidates"}``."""
    scales = SCALES if scales is None else scales
    budget = MEMORY_FRACTION * capacity.memory_bytes
    rows = []
    for name in ladder:
        e = estimate(scales[name])
        step_s = e["step_flops"] / capacity.flops
        rows.append({"name": name, "step_s": step_s, "memory_bytes": e["memory_bytes"],
                     "fits": e["memory_bytes"] <= budget and step_s <= MAX_STEP_S})
    fitting = [r for r in rows if r["fits"]]
    long_enough = [r for r in fitting if r["step_s"] >= MIN_STEP_S]
    pick = long_enough[0] if long_enough else fitting[-1] if fitting else rows[0]
    why = (f"the first whose step (about {pick['step_s']:.3g} s) is at least {MIN_STEP_S:g} s" if long_enough else
           f"no shape that fits gives a step of {MIN_STEP_S:g} s: the largest that fits ({pick['step_s']:.3g} s)"
           if fitting else "nothing fits the memory and time budget: the smallest")
    reason = (f"auto on {capacity.device}: {pick['name']} ({describe(scales[pick['name']])}), {why}, "
              f"estimated {pick['memory_bytes'] / GIB:.2g} GiB of {MEMORY_FRACTION:.0%} x "
              f"{capacity.memory_bytes / GIB:.3g} GiB ({capacity.memory_source}) at "
              f"{capacity.flops / 1e12:.3g} TFLOP/s ({capacity.flops_source})")
    return {"name": pick["name"], "setup": describe(scales[pick["name"]]), "reason": reason, "candidates": rows}


def describe(setup: Setup) -> str:
    return f"{setup.model}, batch {setup.batch}, length {setup.seq}"


# --------------------------------------------------------------------------- readings on the device

def matmul_flops(device: str, n: int | None = None, repeats: int = 5) -> tuple[float, str]:
    """float32 matmul FLOP/s on ``device``: the median of ``repeats`` timed ``n x n`` products
    after a warm-up, the device drained around each (harness.env.timing.median_time)."""
    import torch

    from harness.env import timing
    placed = devices.place(device)   # a stand-in computes on the CPU, inside its context
    n = n or (512 if placed.split(":")[0] == "cpu" else 4096)
    with devices.on_device(device):
        a = torch.randn(n, n, device=placed)
        b = torch.randn(n, n, device=placed)
        seconds = timing.median_time(lambda: a @ b, sync=devices.synchronizer(device), warmup=1, repeats=repeats)
    return 2 * n ** 3 / seconds, f"median of {repeats} float32 {n}x{n} matmuls"


def probe(device: str) -> Capacity:
    """A stand-in is read as what it runs on: the CPU's memory, its matmuls timed through the
    stand-in's context and queue."""
    memory, memory_source = devices.memory_of(devices.place(device))
    flops, flops_source = matmul_flops(device)
    return Capacity(device, memory, memory_source, flops, flops_source)


def resolve(option: str, device: str) -> dict:
    """What ``--workload OPTION`` means on ``device`` (run where the device is: the sandbox)."""
    if option != "auto":
        if option not in SCALES:
            raise ValueError(f"unknown workload {option!r}; known: auto, {', '.join(SCALES)}")
        return {"name": option, "setup": describe(SCALES[option]), "reason": f"--workload {option}",
                "candidates": []}
    return choose(probe(device))
