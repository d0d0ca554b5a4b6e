"""Model time: each architecture's training step, inference and generation, its cold first
step in a fresh process, and what a new input shape costs it.

The architectures are the registry's (harness.core.models: BERT, GPT-2, T5, Llama, and the
pretrained all-MiniLM-L6-v2), built here at the size of the target's training workload
(harness.optim.workloads: hidden size, layers, heads, intermediate size, vocabulary) rather
than the parity suites' hidden-32 toys, so a step spends its time in arithmetic as a user's
does; MiniLM keeps its real size and weights. Batches are seeded token ids at the workload's
batch and length.

Checks (``perf/model-<arch>/<what>``):

* ``train-step``: forward, backward and an AdamW step, warm: seconds per step, samples/s;
* ``inference``: the forward in eval mode under ``torch.no_grad``: seconds, tokens/s;
* ``generate``: greedy decoding of ``NEW_TOKENS`` tokens with the KV cache (decoders only):
  tokens/s;
* ``cold-start``: ``COLD_PROCESSES`` cold processes (torch and transformers imported, nothing
  computed: ``cold_start``), each building the model and taking its first training step,
  then more: the first step's seconds (lazy initialisation, kernel choice, graph building; on MPS the graph cache),
  its spread over the processes (a kernel picked badly on some cold starts shows as spread),
  and the import time beside it;
* ``cold-inference`` and ``cold-generate`` (decoders): the same for a serving process, whose
  first call is an inference (the forward under ``torch.no_grad``) or a generation: the warm
  figures above discard their first calls, so a first request an upgrade made slow showed nowhere;
* ``varying-length``: steps at one length, then ``SHAPE_STEPS`` lengths drawn from a seeded
  distribution, each new, each stepped twice in a row; new in the process too, where every
  architecture's checks run: each architecture meets lengths of its own (``lengths_for``),
  so none finds a shape cache warmed by another. The same length twice does the same
  arithmetic, so the median paired difference (first sight minus second) is what a new
  shape costs (the MPS graph cache builds a graph per input shape): ``per_shape_s``, with
  its interval. A trainer whose batches vary in length pays it at every new length.

Every function that measures runs in the sandbox child and returns plain data; the judges
turn it into the record's Verdict.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from harness.core.records import Category, Status, Verdict
from harness.env import devices, timing
from harness.perf.ops import DeviceClock, Dims, ms, on_target, targets, time_verdict

ARCHS = ("bert", "gpt2", "t5", "llama", "minilm")
DECODERS = ("gpt2", "t5", "llama")
WHATS = ("train-step", "inference", "generate", "cold-start", "varying-length", "cold-inference", "cold-generate")
COLD = {"cold-start": "train", "cold-inference": "inference", "cold-generate": "generate"}   # what -> the first call
NEW_TOKENS = 16            # generated per sequence
GENERATE_BATCH = 4         # sequences decoded at once
SHAPE_STEPS = 6            # new lengths in the varying-length run
MAX_POSITIONS = 512        # every architecture's position limit here (config_kwargs; MiniLM's own)
COLD_PROCESSES = 3         # fresh processes per cold start
COLD_TIMEOUT_S = 300.0
BUDGET_S = {"small": 6.0, "medium": 15.0, "large": 20.0}
SEED = 0


# --------------------------------------------------------------------------- building

def config_kwargs(arch: str, dims: Dims, layers: int) -> dict:
    """The architecture's config at the workload's size."""
    h, n, inner, vocab = dims.hidden, dims.heads, dims.inner, dims.vocab
    if arch == "bert":
        return {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": n, "intermediate_size": inner,
                "vocab_size": vocab, "max_position_embeddings": 512, "num_labels": 2}
    if arch == "gpt2":
        return {"n_embd": h, "n_layer": layers, "n_head": n, "n_inner": inner, "vocab_size": vocab, "n_positions": 512,
                "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    if arch == "t5":
        return {"d_model": h, "d_kv": h // n, "d_ff": inner, "num_layers": layers, "num_decoder_layers": layers,
                "num_heads": n, "vocab_size": vocab, "decoder_start_token_id": 0, "pad_token_id": 0,
                "eos_token_id": 1}
    if arch == "llama":
        return {"hidden_size": h, "intermediate_size": inner, "num_hidden_layers": layers, "num_attention_heads": n,
                "num_key_value_heads": max(1, n // 2), "vocab_size": vocab, "max_position_embeddings": 512,
                "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    raise KeyError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")


def build(arch: str, workload: str, device: str):
    """(model on ``device`` (a target) in train mode, its vocabulary, a description), seeded:
    built on the CPU, then moved to the target (a stand-in's on the CPU inside its context)."""
    import torch
    import transformers

    from harness.optim import workloads
    if arch == "minilm":
        from harness.core import models
        model = models.minilm()
        vocab, about = model.config.vocab_size, "all-MiniLM-L6-v2 (pretrained, 6 layers, hidden 384)"
    else:
        dims = Dims.of_workload(workload)
        layers = workloads.PRESETS[workloads.SCALES[workload].model]["num_hidden_layers"]
        classes = {"bert": ("BertConfig", "BertForSequenceClassification"), "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
                   "t5": ("T5Config", "T5ForConditionalGeneration"), "llama": ("LlamaConfig", "LlamaForCausalLM")}
        from harness.core import models
        config_cls, model_cls = (getattr(transformers, name) for name in classes[arch])
        attn = models.attention_for(model_cls)   # eager where this transformers has no sdpa for it (T5 in 4.x)
        config = config_cls(**config_kwargs(arch, dims, layers), attn_implementation=attn)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            model = model_cls(config)
        vocab = dims.vocab
        about = f"{model_cls.__name__}, {layers} layers, hidden {dims.hidden}, {dims.heads} heads" + (
            "" if attn == "sdpa" else f", {attn} attention (transformers {transformers.__version__} has no sdpa for it)")
    with on_target(device):
        moved = model.to(devices.place(device)).train()
    return moved, vocab, about


def make_batch(arch: str, vocab: int, batch: int, seq: int, device: str, seed: int = SEED) -> dict:
    """Seeded token ids (no padding) and the labels each architecture trains on, on ``device`` (a target)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=gen)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if arch == "bert":
        out["labels"] = torch.randint(0, 2, (batch,), generator=gen)
    elif arch in ("gpt2", "llama"):
        out["labels"] = ids.clone()
    elif arch == "t5":
        out["labels"] = torch.randint(3, vocab, (batch, max(1, seq // 2)), generator=gen)
    with on_target(device):
        return {k: v.to(devices.place(device)) for k, v in out.items()}


def loss_of(output) -> Any:
    """The model's own loss where it computes one (labels given), else the embeddings' mean
    square (MiniLM, a sentence encoder with no head)."""
    loss = getattr(output, "loss", None)
    return loss if loss is not None else output.last_hidden_state.float().pow(2).mean()


class Trainer:
    """A model, its AdamW and one training step over a batch, on a target (``device``; a
    stand-in's steps run inside its context, ``on_target``)."""

    def __init__(self, arch: str, workload: str, device: str):
        import torch

        # the step's modules, imported while building: a cold start's first step times no import
        from harness.optim import measure, workloads  # noqa: F401
        self.arch, self.device = arch, device
        self.model, self.vocab, self.about = build(arch, workload, device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.dims = Dims.of_workload(workload)
        self._context = devices.stand_in(device) is not None

    def batch(self, seq: int | None = None, batch: int | None = None, seed: int = SEED) -> dict:
        return make_batch(self.arch, self.vocab, batch or self.dims.batch, seq or self.dims.seq, self.device, seed)

    def step(self, batch: dict, tracker=None) -> float:
        """One training step; a harness.optim.measure tracker, when given, is told its phases and
        what it makes (activations, gradients, optimizer state), as the optimization suite's are."""
        if self._context:
            with on_target(self.device):
                return self._step(batch, tracker)
        return self._step(batch, tracker)

    def _step(self, batch: dict, tracker=None) -> float:
        from harness.optim import measure, workloads
        pack = workloads.activations_labeller(tracker) if tracker is not None else None
        loss = measure.training_step(self.model, batch, self.optimizer, lambda out, _: loss_of(out), tracker, pack)
        self.optimizer.zero_grad(set_to_none=True)
        return loss


def _clock(device: str) -> DeviceClock:
    # A whole step is host-driven (Python between kernels): its time is wall-clock time with
    # the device drained, which is what the user waits; events would leave out the host.
    return DeviceClock(device, events=False)


def _threads() -> int:
    import torch
    return torch.get_num_threads()


# --------------------------------------------------------------------------- in the sandbox child

def _rate(t: Trainer, fn, what: str, device: str, workload: str, count: int, unit: str, shape: str,
          warmup: int = 2, **extra) -> dict:
    """A warm model figure: ``fn`` timed in rounds, and ``count`` units (samples, tokens) per call as a rate."""
    clock = _clock(device)
    run = timing.time_rounds(clock.within(fn), clock, warmup=warmup, rounds=7, max_rounds=15, min_round_s=0.0,
                             budget_s=BUDGET_S.get(workload, 20.0))
    return {**run, "what": what, "model": t.about, "shape": shape, "per_second": count / run["median_s"],
            "unit": unit, "threads": _threads(), **extra}


def weighed(t: Trainer, call, batch: dict) -> dict:
    """The peak memory of one ``call(tracker)``, counted as the optimization suite counts it
    (harness.optim.measure.weigh_call: tensor storages, the same bytes for the same call in
    every run, with the device allocator's own peak beside it where the device keeps one): the
    model's weights, its optimizer state and ``batch`` resident, the rest made by the call.
    What an upgrade makes a user's step, inference or generation hold at its peak is what
    decides whether their batch still fits (harness.perf.against's ``perf-peak``)."""
    from harness.optim import measure, workloads
    m = measure.weigh_call(t.device, t.model, call, workloads.resident_of(t.model, t.optimizer, [batch]))
    return {"peak_bytes": m["peak_bytes"], "peak_phase": m["peak_phase"], "peak_at": m["at_peak"],
            **{k: m[k] for k in ALLOCATOR_METRICS if m.get(k) is not None}}


def _within(device: str, fn, phase: str):
    """``fn`` as a weighed call: inside the target's context, its one phase marked."""
    def call(tracker):
        tracker.mark(phase)
        with on_target(device):
            return fn()
    return call


def train_step(arch: str, device: str, workload: str) -> dict:
    t = Trainer(arch, workload, device)
    batch = t.batch()
    run = _rate(t, lambda: t.step(batch), "train-step", device, workload, t.dims.batch, "samples/s",
                f"batch {t.dims.batch}, length {t.dims.seq}")
    return {**run, **weighed(t, lambda tracker: t.step(batch, tracker), batch)}   # a warm step: the state exists


def inference(arch: str, device: str, workload: str) -> dict:
    t = Trainer(arch, workload, device)
    forward, batch = call_of(t, arch, "inference")
    run = _rate(t, forward, "inference", device, workload, t.dims.tokens, "tokens/s",
                f"batch {t.dims.batch}, length {t.dims.seq}")
    return {**run, **weighed(t, _within(device, forward, "forward"), batch)}


def generate(arch: str, device: str, workload: str) -> dict:
    t = Trainer(arch, workload, device)
    decode, prompt = call_of(t, arch, "generate")
    with on_target(device):
        out = decode()
    new = int(out.shape[-1] - (1 if arch == "t5" else prompt["input_ids"].shape[-1]))   # T5: the start token
    run = _rate(t, decode, "generate", device, workload, prompt["input_ids"].shape[0] * new, "tokens/s",
                f"batch {prompt['input_ids'].shape[0]}, prompt {prompt['input_ids'].shape[-1]}, {new} new tokens",
                warmup=1, new_tokens=new)
    return {**run, **weighed(t, _within(device, decode, "generate"), prompt)}   # the KV cache is the call's


def met_at(arch: str, n: int) -> set[int]:
    """The sequence lengths a training step of ``arch`` at length ``n`` meets: ``n``, and T5's
    decoder length (its labels, ``make_batch``: half of ``n``)."""
    return {n, max(1, n // 2)} if arch == "t5" else {n}


def lengths_for(seq: int, count: int, seed: int = SEED, arch: str = ARCHS[0], most: int = MAX_POSITIONS) -> list[int]:
    """``arch``'s ``count`` lengths for the varying-length run, new in its process.

    Every architecture's checks run in one sandbox child, and a shape cache (the MPS graph
    cache: a graph per op and input shape) is the process's, not the model's: a length one
    architecture stepped at is no longer new to the next (their hidden sizes are the
    workload's alike). So the lengths are dealt out once for all of ``ARCHS``, in that order,
    from one seeded permutation of those between a quarter of ``seq`` and ``seq`` (then, where
    those run out, upwards from ``seq`` to ``most``, the models' position limit): a length is
    dealt to an architecture only when none of the lengths it meets there (``met_at``) was
    dealt to an architecture before it, or is met by a model check of the process at the
    workload's own length ``seq`` or the fixed run's ``seq // 2`` (train-step, inference,
    generate's prompt). The same for every call, whatever ran before: deterministic."""
    import torch
    if arch not in ARCHS:
        raise KeyError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    fixed = max(2, seq // 2)
    taken = set().union(*(met_at(a, n) for a in ARCHS for n in (seq, fixed)))
    pool = [n for n in range(max(2, seq // 4), seq + 1) if n != seq // 2]
    gen = torch.Generator().manual_seed(seed + 7)
    order = [pool[i] for i in torch.randperm(len(pool), generator=gen).tolist()] + list(range(seq + 1, most + 1))
    for a in ARCHS:
        dealt: list[int] = []
        for n in order:
            if len(dealt) == count:
                break
            if not met_at(a, n) & taken:
                dealt.append(n)
                taken |= met_at(a, n)
        if len(dealt) < count:
            raise ValueError(f"no {count} new lengths for {a} up to {most} positions at a workload length of {seq}")
        if a == arch:
            return dealt
    raise AssertionError("unreachable")


def varying_length(arch: str, device: str, workload: str) -> dict:
    t = Trainer(arch, workload, device)
    clock = _clock(device)
    fixed_len = max(2, t.dims.seq // 2)
    fixed_batch = t.batch(seq=fixed_len)
    for _ in range(2):   # warm: the first steps' one-off costs are the cold start's, not a shape's
        t.step(fixed_batch)
    fixed = [clock.seconds(lambda: t.step(fixed_batch)) for _ in range(SHAPE_STEPS)]
    limit = getattr(t.model.config, "max_position_embeddings", None)   # T5's positions are relative: none
    lengths = lengths_for(t.dims.seq, SHAPE_STEPS, arch=arch, most=min(MAX_POSITIONS, limit or MAX_POSITIONS))
    first, again = [], []
    for i, n in enumerate(lengths):   # each new length twice in a row: the pair shares the machine's moment
        b = t.batch(seq=n, seed=SEED + i)
        first.append(clock.seconds(lambda: t.step(b)))
        again.append(clock.seconds(lambda: t.step(b)))
    low, high = timing.bootstrap_difference_ci(again, first)
    per_shape = statistics.median([f - a for f, a in zip(first, again)])
    fixed_s = statistics.median(fixed)
    fixed_low, fixed_high = timing.bootstrap_median_ci(fixed)
    return {"what": "varying-length", "model": t.about, "lengths": lengths, "fixed_length": fixed_len,
            "batch": t.dims.batch, "fixed_s": fixed_s, "fixed_ci": [fixed_low, fixed_high],
            "first_sight_s": statistics.median(first), "seen_s": statistics.median(again),
            "per_shape_s": per_shape, "ci_low": low, "ci_high": high, "durations_fixed": fixed,
            "durations_first": first, "durations_seen": again, "clock": clock.method, "threads": _threads(),
            "control_s": timing.summary([timing.timed(timing.control_work, lambda: None)
                                         for _ in range(5)])["median_s"]}


def cold_start(arch: str, device: str, workload: str, processes: int = COLD_PROCESSES, call: str = "train") -> dict:
    """``processes`` cold processes in turn, each reporting its first ``call`` (``COLD``'s: a
    training step, an inference, a generation).

    A cold process has imported torch and transformers and computed nothing. Importing them
    takes most of the seconds a fresh interpreter costs (about 12 s of 13 on a 2-core VM), so
    on Linux the processes are forked from a zygote (``Zygote``) that imported them once and
    never ran an op: torch initialises its thread pools, kernels and device context lazily, at
    the first op, so a forked child's first step pays what a fresh process's does. The import
    time is the zygote's. On macOS (Metal and Objective-C forbid fork after their frameworks
    loaded) and where fork is absent, each is a fresh interpreter.
    """
    runs = [_zygote().first_step(arch, device, workload, call) if _forks() else _fresh(arch, device, workload, call)
            for _ in range(processes)]
    first = [r["first_step_s"] for r in runs]
    what = next(w for w, c in COLD.items() if c == call)
    return {**timing.summary(first), "what": what, "model": runs[0]["model"], "runs": runs,
            "durations": first, "import_s": statistics.median(r["import_s"] for r in runs),
            "build_s": statistics.median(r["build_s"] for r in runs),
            "warm_s": statistics.median(r["warm_s"] for r in runs), "threads": runs[0]["threads"],
            "clock": "wall clock", "control_s": statistics.median(r["control_s"] for r in runs),
            "shape": runs[0]["shape"], "processes": runs[0]["process"]}


def _forks() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _fresh(arch: str, device: str, workload: str, call: str = "train") -> dict:
    res = subprocess.run([sys.executable, "-m", "harness.perf.models", "cold", arch, device, workload, call],
                         capture_output=True, text=True, timeout=COLD_TIMEOUT_S, env=dict(os.environ))
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise RuntimeError(f"the fresh process for {arch}'s cold start failed: {tail}")
    return json.loads(res.stdout.strip().splitlines()[-1])


class Zygote:
    """A process that imported torch and transformers and forks a cold child per request,
    kept for the sandbox child's life (``_zygote``)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.perf.models", "zygote"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=dict(os.environ))
        self.import_s = json.loads(self._line())["import_s"]

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote process for cold starts ended (exit status {self.proc.poll()})")
        return line

    def first_step(self, arch: str, device: str, workload: str, call: str = "train") -> dict:
        self.proc.stdin.write(json.dumps([arch, device, workload, call]) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self._line())
        if "error" in out:
            raise RuntimeError(f"the cold process for {arch} failed: {out['error']}")
        return {**out, "import_s": self.import_s}


_ZYGOTE: list[Zygote] = []


def _zygote() -> Zygote:
    if not _ZYGOTE or _ZYGOTE[0].proc.poll() is not None:
        _ZYGOTE[:] = [Zygote()]
    return _ZYGOTE[0]


def import_models() -> float:
    """Import torch, transformers and the architectures' code (transformers imports a
    model's code on first use); the seconds it took."""
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers
    for name in ("BertForSequenceClassification", "GPT2LMHeadModel", "T5ForConditionalGeneration", "LlamaForCausalLM",
                 "BertModel", "get_linear_schedule_with_warmup"):
        getattr(transformers, name)
    return time.perf_counter() - t0


def call_of(t: Trainer, arch: str, call: str):
    """(the call, its inputs): a training step on the workload's batch, an inference (eval
    mode, ``torch.no_grad``) on it, or a greedy generation of ``NEW_TOKENS`` tokens with the KV
    cache from a prompt of half its length and ``GENERATE_BATCH`` sequences. The warm checks
    time these, and a cold process makes one first (``COLD``)."""
    import torch
    if call == "train":
        batch = t.batch()
        return (lambda: t.step(batch)), batch
    t.model.eval()
    if call == "inference":
        batch = {k: v for k, v in t.batch().items() if k != "labels" or arch == "t5"}

        def forward():
            with torch.no_grad():
                return t.model(**batch)
        return forward, batch
    if call != "generate":
        raise ValueError(f"no such call: {call!r} (train, inference or generate)")
    prompt = t.batch(seq=max(2, t.dims.seq // 2), batch=min(GENERATE_BATCH, t.dims.batch))

    def decode():
        with torch.no_grad():
            return t.model.generate(input_ids=prompt["input_ids"], attention_mask=prompt["attention_mask"],
                                    max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                    use_cache=True, pad_token_id=0)
    return decode, prompt


def _first_steps(arch: str, device: str, workload: str, process: str, call: str = "train") -> dict:
    """In a cold process: build, the first ``call``, two warm ones."""
    import torch

    from harness.core import isolate
    isolate.prepare_child()
    t1 = time.perf_counter()
    t = Trainer(arch, workload, device)
    build_s = time.perf_counter() - t1
    fn, _ = call_of(t, arch, call)
    clock = _clock(device)
    with on_target(device):
        first = clock.seconds(fn)
        warm = [clock.seconds(fn) for _ in range(2)]
    control = statistics.median(timing.timed(timing.control_work, lambda: None) for _ in range(5))
    return {"model": t.about, "build_s": build_s, "first_step_s": first, "warm_s": min(warm),
            "threads": torch.get_num_threads(), "control_s": control, "process": process,
            "shape": f"batch {t.dims.batch}, length {t.dims.seq}"}


def _cold_main(arch: str, device: str, workload: str, call: str = "train") -> None:
    """A fresh interpreter's cold start: one JSON line out."""
    import_s = import_models()
    print(json.dumps({**_first_steps(arch, device, workload, "fresh interpreter", call), "import_s": import_s}))


def _zygote_main() -> None:
    """Import once, then fork a cold child per request line ``[arch, device, workload]``."""
    from harness.core import isolate
    import_s = import_models()
    for module in filter(None, os.environ.get(isolate.PRELOAD_VAR, "").split(",")):
        __import__(module)   # an injected fault (a test's) is imported, as any child imports it
    print(json.dumps({"import_s": import_s}), flush=True)
    for line in sys.stdin:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                arch, device, workload, *call = json.loads(line)
                out = _first_steps(arch, device, workload, "forked from a zygote that imported torch and transformers",
                                   *call)
            except Exception as exc:   # the child's failure goes back as one line
                out = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            os.write(write, (json.dumps(out) + "\n").encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            answer = pipe.read().strip()
        _, status = os.waitpid(pid, 0)
        print(answer or json.dumps({"error": f"the cold child died (wait status {status})"}), flush=True)


MEASURE = {"train-step": train_step, "inference": inference, "generate": generate, "varying-length": varying_length,
           **{what: functools.partial(cold_start, call=call) for what, call in COLD.items()}}


def measure(arch: str, what: str, device: str, workload: str) -> dict:
    """The sandbox's entry: one model check, measured alone on the machine (timing.alone;
    a cold start's zygote imports before, in parallel with the others), with the machine's
    load around it (timing.load_during)."""
    import_models()   # paid once per child, outside the lock
    if what in COLD and _forks():
        _zygote()
    with timing.alone() as waited, timing.load_during() as load:
        found = MEASURE[what](arch, device, workload)
    return {**found, "waited_s": round(waited, 3), "load": load}


# --------------------------------------------------------------------------- the cases

class ModelTimeCase:
    """One architecture x what, of the shape harness.core.cases.Case: ``perf/model-<arch>/<what>``."""

    def __init__(self, arch: str, what: str):
        self.arch, self.what = arch, what
        self.subject, self.variant = f"model-{arch}", what
        self.id = f"{arch}-{what}"

    @property
    def targets(self) -> tuple[str, ...]:
        return targets()

    def not_timed(self) -> Verdict | None:
        if self.what in ("generate", "cold-generate") and self.arch not in DECODERS:
            return Verdict(Status.SKIP, Category.NA, f"{self.arch} is an encoder: it generates nothing "
                                                     f"(generation is timed for {', '.join(DECODERS)})")
        return None


CASES = tuple(ModelTimeCase(arch, what) for arch in ARCHS for what in WHATS)


# --------------------------------------------------------------------------- verdicts

def judge(run: dict) -> Verdict:
    what = run["what"]
    if what == "varying-length":
        return shape_verdict(run)
    extra = {"model": run["model"], "durations": [round(x, 6) for x in run["durations"]]}
    if what in COLD:
        extra.update(import_s=run["import_s"], build_s=run["build_s"], warm_s=run["warm_s"],
                     cold_overhead_s=run["median_s"] - run["warm_s"],
                     processes=run["runs"])
        call = {"train": "training step", "inference": "inference", "generate": "generation"}[COLD[what]]
        v = time_verdict(run, f"{run['model']}: the first {call} of a cold process, over {run['rounds']} "
                              f"process{'es' if run['rounds'] != 1 else ''}", extra,
                         f"cold_start's processes=, {COLD_PROCESSES} in the suite")
        spread = max(run["durations"]) / min(run["durations"]) if min(run["durations"]) > 0 else float("inf")
        note = (f"; a warm {call} takes {ms(run['warm_s'])}; before the first, importing torch and transformers' "
                f"models took {ms(run['import_s'])}, building the model {ms(run['build_s'])}"
                + (f"; slowest cold start {spread:.2g}x the fastest" if len(run["durations"]) > 1 else ""))
        return Verdict(v.status, v.category, v.message + note, {**v.metrics, "spread": spread})
    extra.update(per_second=run["per_second"], unit=run["unit"])
    extra.update({k: run[k] for k in PEAK_METRICS if k in run})
    v = time_verdict(run, f"{run['model']} {what} at {run['shape']}", extra)
    return Verdict(v.status, v.category, v.message + f"; {run['per_second']:.4g} {run['unit']}" + peak_note(run),
                   v.metrics)


# What a weighed model check keeps of its peak (``weighed``), compared with a baseline's by
# harness.perf.against (perf-peak).
ALLOCATOR_METRICS = ("allocator_peak", "allocator_method", "allocator_reason", "allocator_held",
                     "allocator_driver_peak")   # the last: MPS's whole Metal heap, where it is sampled
PEAK_METRICS = ("peak_bytes", "peak_phase", "peak_at", *ALLOCATOR_METRICS)


def peak_note(run: dict) -> str:
    """"; peak 71.2 MiB of tensors (in backward: activations 30.1 MiB, ...)", or "" unweighed."""
    if not isinstance(run.get("peak_bytes"), int):
        return ""
    parts = sorted(((n, c) for c, n in (run.get("peak_at") or {}).items() if n), reverse=True)
    made_of = ", ".join(f"{c.replace('_', ' ')} {n / 2 ** 20:.3g} MiB" for n, c in parts[:3])
    note = f"; peak {run['peak_bytes'] / 2 ** 20:.4g} MiB of tensors"
    where = f"in {run['peak_phase']}" if run.get("peak_phase") not in (None, "step", "setup") else ""
    inner = ": ".join(x for x in (where, made_of) if x)
    return note + (f" ({inner})" if inner else "")   # the allocator's own figures stay in the metrics, beside it


def shape_verdict(run: dict) -> Verdict:
    """What a new input length costs a training step, with its interval."""
    step = run["seen_s"]
    width = timing.relative_width(run["ci_low"], run["ci_high"], step)
    noisy = width > timing.NOISY_WIDTH
    message = (f"{run['model']}: a step at a new length takes {ms(run['first_sight_s'])}, the same lengths again "
               f"{ms(run['seen_s'])}: a new shape costs {ms(max(run['per_shape_s'], 0.0))} per step "
               f"(interval [{ms(run['ci_low'])}, {ms(run['ci_high'])}] of the paired difference, "
               f"{len(run['lengths'])} lengths); one length throughout: {ms(run['fixed_s'])} per step")
    if noisy:
        message += f"; noisy: the interval spans {width:.0%} of a step"
    metrics = {k: run[k] for k in ("per_shape_s", "ci_low", "ci_high", "fixed_s", "first_sight_s", "seen_s",
                                   "lengths", "fixed_length", "batch", "clock", "threads", "control_s", "model")}
    if "load" in run:   # the load it was measured under (measure's reading), compared with the baseline's
        metrics["load"] = run["load"]
    metrics.update(width=width, shape_share=run["per_shape_s"] / step if step > 0 else None,
                   durations_first=[round(x, 6) for x in run["durations_first"]],
                   durations_seen=[round(x, 6) for x in run["durations_seen"]])
    return Verdict(Status.PASS, Category.NOISY if noisy else Category.TIMED, message, metrics)


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "cold":
        _cold_main(*sys.argv[2:])
    elif sys.argv[1:] == ["zygote"]:
        _zygote_main()
    else:
        sys.exit("usage: python -m harness.perf.models cold ARCH DEVICE WORKLOAD [train|inference|generate] | zygote")
