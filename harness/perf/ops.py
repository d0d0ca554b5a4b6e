"""Op time: the ops training and inference spend their time in, timed on a target.

One check per op, dtype and pass: ``perf/<op>/<dtype>/<forward|backward>`` (the AdamW step:
``perf/adamw_step/float32/step``). Each op is given inputs at the shapes the target's training
workload uses (harness.optim.workloads: the model's hidden size, heads, intermediate size and
vocabulary, the workload's batch and length), so an op is timed where a user's step spends it:
a linear over every token, attention scores of batch x heads x length x length, logits over
the vocabulary.

* ``forward``: the op with autograd recording (as in a training step's forward);
* ``backward``: the gradients of its inputs for a fixed output gradient
  (``torch.autograd.grad`` over a graph kept with ``retain_graph``, so the forward is not
  inside the figure);
* the dtypes: float32 and the half types the target trains in (float16 and bfloat16 on CUDA
  and MPS, where the device has them; bfloat16 on the CPU, which is what CPU autocast uses).

Timing is harness.env.timing's (synchronized, device events where there are any, warm-up,
rounds with a control, the median and its bootstrap interval). ``run_case`` runs in the
sandbox child and returns plain data; ``judge`` turns it into the record's Verdict: a time is
a figure, not a pass or a fail on its own; what it means comes from a baseline of the same
machine (harness.report.compare).
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

from harness.core.cases import DtypePass
from harness.core.records import Category, Status, Verdict
from harness.env import devices, timing

DTYPES = ("float32", "float16", "bfloat16")
HALF_ON_CPU = "bfloat16"   # CPU autocast's dtype; float16 on the CPU is timed nowhere a user trains in it
TARGETS = devices.TARGETS
BUDGET_S = {"small": 1.0, "medium": 2.0, "large": 2.0}   # per check: rounds are bought until this is spent


@dataclasses.dataclass(frozen=True)
class Dims:
    """The shapes an op is timed at: a training workload's."""
    batch: int
    seq: int
    hidden: int
    heads: int
    inner: int
    vocab: int

    @classmethod
    def of_workload(cls, name: str) -> "Dims":
        from harness.optim import workloads
        setup = workloads.SCALES[name]
        c = workloads.PRESETS[setup.model]
        return cls(setup.batch, setup.seq, c["hidden_size"], c["num_attention_heads"], c["intermediate_size"],
                   c["vocab_size"])

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def describe(self) -> str:
        return (f"batch {self.batch}, length {self.seq}, hidden {self.hidden}, heads {self.heads}, "
                f"intermediate {self.inner}, vocabulary {self.vocab}")


# --------------------------------------------------------------------------- the ops

class Inputs:
    """Seeded tensors on the device (made on the CPU, then moved: the same values everywhere)."""

    def __init__(self, device: str, dtype):
        import torch
        self.device, self.dtype = device, dtype
        self.gen = torch.Generator().manual_seed(0)
        self.grads: list = []       # inputs whose gradients the backward pass computes

    def float(self, *shape, grad: bool = True, scale: float = 1.0):
        import torch
        t = (torch.randn(*shape, generator=self.gen) * scale).to(self.device, self.dtype)
        if grad:
            t.requires_grad_(True)
            self.grads.append(t)
        return t

    def ints(self, high: int, *shape):
        import torch
        return torch.randint(0, high, shape, generator=self.gen).to(self.device)


def _linear(d: Dims, x: Inputs):
    import torch.nn.functional as F
    a, w, b = x.float(d.tokens, d.hidden), x.float(d.inner, d.hidden, scale=0.05), x.float(d.inner)
    return lambda: F.linear(a, w, b)


def _matmul(d: Dims, x: Inputs):
    a, b = x.float(d.tokens, d.hidden), x.float(d.hidden, d.inner, scale=0.05)
    return lambda: a @ b


def _bmm(d: Dims, x: Inputs):
    import torch
    head = d.hidden // d.heads
    q, k = x.float(d.batch * d.heads, d.seq, head), x.float(d.batch * d.heads, head, d.seq)
    return lambda: torch.bmm(q, k)


def _addmm(d: Dims, x: Inputs):
    import torch
    bias, a, w = x.float(d.inner), x.float(d.tokens, d.hidden), x.float(d.hidden, d.inner, scale=0.05)
    return lambda: torch.addmm(bias, a, w)


def _conv2d(d: Dims, x: Inputs):
    import torch.nn.functional as F
    channels = max(8, d.hidden // 8)   # a patch embedding / vision block's width, scaled with the model
    img, w = x.float(d.batch, channels, 32, 32), x.float(channels, channels, 3, 3, scale=0.1)
    return lambda: F.conv2d(img, w, padding=1)


def _layer_norm(d: Dims, x: Inputs):
    import torch.nn.functional as F
    h, w, b = x.float(d.batch, d.seq, d.hidden), x.float(d.hidden), x.float(d.hidden)
    return lambda: F.layer_norm(h, (d.hidden,), w, b)


def _group_norm(d: Dims, x: Inputs):
    import torch.nn.functional as F
    h, w, b = x.float(d.batch, d.hidden, d.seq), x.float(d.hidden), x.float(d.hidden)
    return lambda: F.group_norm(h, d.heads, w, b)


def _softmax(d: Dims, x: Inputs):
    import torch
    s = x.float(d.batch, d.heads, d.seq, d.seq)
    return lambda: torch.softmax(s, dim=-1)


def _log_softmax(d: Dims, x: Inputs):
    import torch
    logits = x.float(d.tokens, d.vocab)
    return lambda: torch.log_softmax(logits, dim=-1)


def _sdpa(d: Dims, x: Inputs):
    import torch.nn.functional as F
    head = d.hidden // d.heads
    q, k, v = (x.float(d.batch, d.heads, d.seq, head) for _ in range(3))
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _gelu(d: Dims, x: Inputs):
    import torch.nn.functional as F
    h = x.float(d.batch, d.seq, d.inner)
    return lambda: F.gelu(h)


def _silu(d: Dims, x: Inputs):
    import torch.nn.functional as F
    h = x.float(d.batch, d.seq, d.inner)
    return lambda: F.silu(h)


def _embedding(d: Dims, x: Inputs):
    import torch.nn.functional as F
    ids, table = x.ints(d.vocab, d.batch, d.seq), x.float(d.vocab, d.hidden)
    return lambda: F.embedding(ids, table)


def _cat(d: Dims, x: Inputs):
    import torch
    parts = [x.float(d.batch, d.seq, d.hidden) for _ in range(4)]
    return lambda: torch.cat(parts, dim=-1)


def _stack(d: Dims, x: Inputs):
    import torch
    parts = [x.float(d.batch, d.seq, d.hidden) for _ in range(4)]
    return lambda: torch.stack(parts, dim=1)


def _index_select(d: Dims, x: Inputs):
    import torch
    table, idx = x.float(d.vocab, d.hidden), x.ints(d.vocab, d.tokens)
    return lambda: torch.index_select(table, 0, idx)


def _gather(d: Dims, x: Inputs):
    import torch
    logits, idx = x.float(d.tokens, d.vocab), x.ints(d.vocab, d.tokens, 8)
    return lambda: torch.gather(logits, 1, idx)


def _scatter_add(d: Dims, x: Inputs):
    import torch
    src, idx = x.float(d.tokens, d.hidden), x.ints(d.vocab, d.tokens, 1)
    base = torch.zeros(d.vocab, d.hidden, device=x.device, dtype=x.dtype)
    index = idx.expand(d.tokens, d.hidden)
    return lambda: base.scatter_add(0, index, src)


def _mul(d: Dims, x: Inputs):
    a, b = x.float(d.batch, d.seq, d.inner), x.float(d.batch, d.seq, d.inner)
    return lambda: a * b


def _add(d: Dims, x: Inputs):
    a, b = x.float(d.batch, d.seq, d.inner), x.float(d.batch, d.seq, d.inner)
    return lambda: a + b


def _sum(d: Dims, x: Inputs):
    h = x.float(d.batch, d.seq, d.inner)
    return lambda: h.sum(dim=-1)


def _amax(d: Dims, x: Inputs):
    h = x.float(d.batch, d.seq, d.inner)
    return lambda: h.amax(dim=-1)


def _cross_entropy(d: Dims, x: Inputs):
    import torch.nn.functional as F
    logits, labels = x.float(d.tokens, d.vocab), x.ints(d.vocab, d.tokens)
    return lambda: F.cross_entropy(logits, labels)


def _adamw_step(d: Dims, x: Inputs):
    """One AdamW step (the optimizer torch picks for the device) over one transformer layer's
    parameters: four hidden x hidden projections, the two MLP matrices, their biases."""
    import torch
    shapes = [(d.hidden, d.hidden)] * 4 + [(d.inner, d.hidden), (d.hidden, d.inner)] + [(d.hidden,)] * 5 + [(d.inner,)]
    params = [x.float(*s, grad=False).requires_grad_(True) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=x.gen).to(x.device, x.dtype) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-4)
    return opt.step


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    build: Callable[[Dims, Inputs], Callable[[], Any]]
    what: str
    passes: tuple[str, ...] = ("forward", "backward")
    dtypes: tuple[str, ...] = DTYPES


OPS: dict[str, Op] = {op.name: op for op in (
    Op("linear", _linear, "F.linear over every token: tokens x hidden -> intermediate"),
    Op("matmul", _matmul, "tokens x hidden @ hidden x intermediate"),
    Op("bmm", _bmm, "attention scores: (batch x heads) x length x head_dim @ head_dim x length"),
    Op("addmm", _addmm, "bias + tokens x hidden @ hidden x intermediate (GPT-2's Conv1D)"),
    Op("conv2d", _conv2d, "3x3 convolution, batch x hidden/8 channels x 32 x 32"),
    Op("layer_norm", _layer_norm, "over hidden, batch x length x hidden"),
    Op("group_norm", _group_norm, "heads groups over batch x hidden x length"),
    Op("softmax", _softmax, "attention scores, batch x heads x length x length"),
    Op("log_softmax", _log_softmax, "logits over the vocabulary, tokens x vocabulary"),
    Op("scaled_dot_product_attention", _sdpa, "causal, batch x heads x length x head_dim"),
    Op("gelu", _gelu, "batch x length x intermediate"),
    Op("silu", _silu, "batch x length x intermediate"),
    Op("embedding", _embedding, "token ids into vocabulary x hidden"),
    Op("cat", _cat, "four batch x length x hidden along the last dim"),
    Op("stack", _stack, "four batch x length x hidden"),
    Op("index_select", _index_select, "a row per token from vocabulary x hidden"),
    Op("gather", _gather, "8 entries per token from tokens x vocabulary"),
    Op("scatter_add", _scatter_add, "a row per token into vocabulary x hidden"),
    Op("mul", _mul, "elementwise, batch x length x intermediate"),
    Op("add", _add, "elementwise, batch x length x intermediate"),
    Op("sum", _sum, "over the last dim of batch x length x intermediate"),
    Op("amax", _amax, "over the last dim of batch x length x intermediate"),
    Op("cross_entropy", _cross_entropy, "tokens x vocabulary logits, a label per token"),
    Op("adamw_step", _adamw_step, "AdamW over one transformer layer's parameters", passes=("step",),
       dtypes=("float32",)),
)}


@dataclasses.dataclass(frozen=True)
class OpTimeCase(DtypePass):
    """One op x dtype x pass, of the shape harness.core.cases.Case (ids: DtypePass)."""
    op: str
    dtype: str
    pass_: str

    @property
    def subject(self) -> str:
        return self.op

    @property
    def targets(self) -> tuple[str, ...]:
        """The CPU times float32 and its training half type only (HALF_ON_CPU)."""
        every = targets()
        return every if self.dtype in ("float32", HALF_ON_CPU) else tuple(t for t in every if t != "cpu")

    def not_timed(self, target: str, backend) -> Verdict | None:
        """Why this check is not timed on ``target`` (a skip), or None."""
        import torch
        if getattr(torch, self.dtype) not in backend.dtypes():
            return Verdict(Status.SKIP, Category.NA, f"{target} has no {self.dtype} here "
                                                     "(harness.env.devices: MPS needs macOS 14 for bfloat16)")
        return None


CASES = tuple(OpTimeCase(op.name, dtype, p) for op in OPS.values() for dtype in op.dtypes for p in op.passes)


def targets() -> tuple[str, ...]:
    """The targets perf times: the real ones and the registered emulating stand-ins (the
    emulated Mac, timed through MPS's paths: its queue, its memory API). A plain stand-in
    is a parity device, its times the CPU's."""
    return TARGETS + tuple(name for name in devices.STAND_INS if devices.is_emulated(name))


# --------------------------------------------------------------------------- a target's clock

_ENTERED: set[str] = set()   # the targets whose context this process is inside (``on_target``)


@contextlib.contextmanager
def on_target(target: str):
    """devices.on_device(target), entered once: inside it already (a training step inside a
    timed round), a no-op. A real device has no context to enter."""
    if target in _ENTERED or devices.stand_in(target) is None:
        yield
        return
    _ENTERED.add(target)
    try:
        with devices.on_device(target):
            yield
    finally:
        _ENTERED.discard(target)


class DeviceClock:
    """harness.env.timing's Clock for a target, whose device work runs inside the target's
    context (devices.on_device: the emulated Mac's rules and queue are in force there
    only): each reading and drain enters it (``on_target``), and so does a call of
    ``within(fn)`` made outside a reading (the warm-up); the statistics stay outside
    (their float64 would be device work). A real device has no such context: this is its
    Clock (events, synchronize), and ``within`` gives ``fn`` itself."""

    def __init__(self, target: str, events: bool = True):
        self.target = target
        self.clock = timing.Clock(devices.place(target), devices.synchronizer(target), events=events)
        self.method = self.clock.method

    def sync(self) -> None:
        with on_target(self.target):
            self.clock.sync()

    def seconds(self, fn: Callable[[], Any], inner: int = 1) -> float:
        with on_target(self.target):
            return self.clock.seconds(fn, inner)

    def within(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn`` run inside the target's context wherever it is called."""
        if devices.stand_in(self.target) is None:
            return fn

        def call():
            if self.target in _ENTERED:
                return fn()
            with on_target(self.target):
                return fn()
        return call


# --------------------------------------------------------------------------- in the sandbox child

def run_case(op: str, dtype: str, pass_: str, device: str, workload: str) -> dict:
    """Time one op on ``device`` (a target; in the sandbox child): ``time_rounds``'s figure,
    with the shapes and how it was taken. The inputs are made and the op timed on the target
    (a stand-in's on the CPU, devices.place, inside its context: DeviceClock)."""
    import torch
    spec = OPS[op]
    dims = Dims.of_workload(workload)
    where = devices.place(device)
    with on_target(device):
        inputs = Inputs(where, getattr(torch, dtype))
        fn = spec.build(dims, inputs)
        if pass_ == "backward":
            out = fn()
            grad_out = torch.randn(out.shape, generator=inputs.gen).to(where, out.dtype)
            grads = inputs.grads

            def timed_fn():
                return torch.autograd.grad(out, grads, grad_out, retain_graph=True)
        else:
            timed_fn = fn
    clock = DeviceClock(device)
    with timing.alone() as waited, timing.load_during() as load:
        result = timing.time_rounds(clock.within(timed_fn), clock, budget_s=BUDGET_S.get(workload, 3.0))
    return {**result, "waited_s": round(waited, 3), "load": load, "op": op, "dtype": dtype, "pass": pass_,
            "device": device, "workload": workload,
            "shape": dims.describe(), "what": spec.what, "threads": torch.get_num_threads()}


# --------------------------------------------------------------------------- the verdict

def figure(run: dict) -> str:
    """A time with its interval, in the unit that reads best."""
    return f"{ms(run['median_s'])} [{ms(run['ci_low'])}, {ms(run['ci_high'])}]"


def ms(seconds: float) -> str:
    """A time in the unit its size asks for: "1.5 s", "7.13 ms", "959 us"; a negative one (an
    interval's low end) by its size too: "-1.54 ms", not "-1.54e+03 us"."""
    size = abs(seconds)
    if size >= 1:
        return f"{seconds:.3g} s"
    if size >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


# What a time's record keeps: the figure, how it was taken, and the load it was taken under
# (harness.perf.against compares times only under a like load).
TIME_METRICS = ("median_s", "ci_low", "ci_high", "rounds", "inner", "width", "clock", "control_s", "threads",
                "shape", "workload", "waited_s", "load")


def time_verdict(run: dict, what: str, extra: dict | None = None, more: str = "more rounds") -> Verdict:
    """A time figure as a record: a pass whose category says whether the interval is narrow
    enough to compare with another run (``timed``) or not (``noisy``: the machine was too busy
    or the op too short to tell; a compare says inconclusive rather than regressed). A figure
    of one sample (timing.summary's ``no_interval``) has no interval at all: noisy, saying so
    and what gives more samples (``more``)."""
    noisy = bool(run["noisy"])
    message = f"{what}: {figure(run)} per call ({run['rounds']} rounds, {run['clock']})"
    if run.get("no_interval"):
        message = f"{what}: {ms(run['median_s'])} ({run['clock']}); noisy: {run['no_interval']} ({more})"
        extra = {**(extra or {}), "no_interval": run["no_interval"]}
    elif noisy:
        message += (f"; noisy: the interval spans {run['width']:.0%} of the median (over "
                    f"{timing.NOISY_WIDTH:.0%}): a busy machine, compare with care")
    metrics = {k: run[k] for k in TIME_METRICS if k in run}
    return Verdict(Status.PASS, Category.NOISY if noisy else Category.TIMED, message, {**metrics, **(extra or {})})


def judge(run: dict) -> Verdict:
    return time_verdict(run, f"{run['op']} {run['dtype']} {run['pass']} at {run['shape']}",
                        {"durations": [round(x, 9) for x in run["durations"]]})
