"""The claims through the ``transformers.Trainer``: the documented TrainingArguments flags.

The second entry point of the optimization suite (the first is the plain-PyTorch loop of
harness/optim/techniques.py). A claim whose knob is a ``TrainingArguments`` field (claims.py
``knob_trainer``) is measured by training the same model on the same small ``datasets``
dataset twice, once with the baseline arguments and once with the claim's flags, as a
user's script would. Memory: the tracked storage peak over ``trainer.train()`` (model,
optimizer state, batches, everything the run allocates). Time: ``train()`` calls of the
two trainers interleaved by harness.optim.ratios.compare_time. A claim made for a loader that
is the bottleneck (LOADING_CLAIMS: DataLoader workers) trains on one: documents tokenized as
each row is read (``text_dataset``), its loader kept across calls (``kept_loader``) and timed
alone (``loading_bottleneck``).
"""
from __future__ import annotations

import tempfile

from harness.core.records import Category
from harness.env import devices
from harness.optim import claims, ratios, techniques
from harness.optim.ratios import Bound
from harness.optim.techniques import ClaimRun
from harness.optim.workloads import (PRESETS, SCALES, SEED, TIME_BUDGET_S, TIME_ROUNDS, Setup, activations_labeller,
                                     build_model, initial_weights, key_of, resident_of)

STEPS = 2            # optimizer steps per train() call
EXAMPLES = 64        # rows of the dataset
# What goes through the Trainer: claims.WHERE_MEASURED's rows of entry claims.TRAINER.


def dataset(setup: Setup):
    """``EXAMPLES`` rows of token ids of varying length (a quarter to all of ``seq``), labels
    0/1: a ``datasets.Dataset`` built in memory, as a training script builds one."""
    import torch
    from datasets import Dataset
    gen = torch.Generator().manual_seed(SEED + 2)
    lengths = torch.randint(max(1, setup.seq // 4), setup.seq + 1, (EXAMPLES,), generator=gen).tolist()
    vocab = PRESETS[setup.model]["vocab_size"]
    rows = {"input_ids": [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths],
            "labels": torch.randint(0, 2, (EXAMPLES,), generator=gen).tolist()}
    return Dataset.from_dict(rows)


# Claims whose document makes them for a loader that is the bottleneck (claims.py's notes).
LOADING_CLAIMS = ("dataloader-workers",)
# The loading claims' loader: the document advises workers for a loader that is
# the bottleneck, so their dataset is raw text tokenized on the fly, as a script that tokenizes in
# ``with_transform`` does. Each row is a document of DOC_WORDS words, tokenized whole and truncated
# to ``seq`` (a fast tokenizer reads all of it): about 5 ms a row on the developers' 2-core VM, so
# loading is a real share of a step (the record's ``loading`` says how much, on each device).
DOC_WORDS = 8000
LOADING_STEPS = 8    # optimizer steps per train() call of a loading claim: one epoch of its rows
_WORDS: dict[int, list[str]] = {}


def words(vocab_size: int) -> list[str]:
    """``vocab_size`` - 5 distinct lowercase words, the same on every machine (a seeded
    generator), to make a WordPiece vocabulary and documents from."""
    if vocab_size not in _WORDS:
        import random
        rng, found = random.Random(SEED + 3), set()
        while len(found) < vocab_size - 5:
            found.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
        _WORDS[vocab_size] = sorted(found)
    return _WORDS[vocab_size]


def tokenizer(vocab_size: int):
    """A BERT-style WordPiece tokenizer over ``words(vocab_size)``, built with the tokenizers
    library (no hub, no files): lowercasing normaliser, BERT's pre-tokenizer, [PAD] = 0."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words(vocab_size)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")


class Tokenize:
    """The on-the-fly transform (``Dataset.with_transform``): a batch of documents to token ids
    truncated to ``seq``. A module-level class, so DataLoader workers started with 'spawn'
    (macOS) can pickle the dataset."""

    def __init__(self, tok, seq: int):
        self.tok, self.seq = tok, seq

    def __call__(self, batch: dict) -> dict:
        ids = self.tok(batch["text"], truncation=True, max_length=self.seq)["input_ids"]
        return {"input_ids": ids, "labels": batch["labels"]}


_TEXTS: dict[tuple, object] = {}


def text_dataset(setup: Setup, rows: int):
    """``rows`` documents of DOC_WORDS words each (labels 0/1), tokenized when a row is read
    (``Tokenize``): the loader of the loading claims, which costs time per row. Made once per
    process for its vocabulary, width and rows (both sides of a claim read the same one)."""
    import random

    from datasets import Dataset
    vocab = PRESETS[setup.model]["vocab_size"]
    key = (vocab, setup.seq, rows)
    if key not in _TEXTS:
        pool, rng = words(vocab), random.Random(SEED + 4)
        docs = [" ".join(rng.choice(pool) for _ in range(DOC_WORDS)) for _ in range(rows)]
        data = Dataset.from_dict({"text": docs, "labels": [rng.randint(0, 1) for _ in range(rows)]})
        _TEXTS[key] = data.with_transform(Tokenize(tokenizer(vocab), setup.seq))
    return _TEXTS[key]


def kept_loader(trainer) -> None:
    """Make ``trainer`` build its training DataLoader once and iterate that one in every
    ``train()`` call: with ``dataloader_persistent_workers`` its workers start in the first
    call (the warm-up, whose seconds keep the start-up) and the timed calls measure loading
    with the workers running, as every epoch after the first does in a user's run. Each call
    is one whole epoch (LOADING_STEPS x the batch rows), so no call leaves batches behind."""
    build, kept = trainer.get_train_dataloader, []

    def get_train_dataloader():
        if not kept:
            kept.append(build())
        return kept[0]
    trainer.get_train_dataloader = get_train_dataloader


class collator:
    """Pads a batch to ``max_length`` (padding="max_length") or, with None, to its longest row.
    A module-level class, not a closure: DataLoader workers started with 'spawn' (torch's
    default on macOS, where the Trainer does not pick 'fork' itself as it does on MPS; or a
    user's dataloader_multiprocessing_context) pickle the collate function with the dataset."""

    def __init__(self, max_length: int | None):
        self.max_length = max_length

    def __call__(self, rows):
        import torch
        width = self.max_length or max(len(r["input_ids"]) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = min(len(r["input_ids"]), width)
            ids[i, :n] = torch.tensor(r["input_ids"][:n])
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r["labels"] for r in rows])}


# A claim's baseline, set where the TrainingArguments default is (or may be) the variant itself: the
# Trainer pins memory by default; transformers 5.x defaults to optim="adamw_torch_fused" with torch
# >= 2.8 (training_args.py), so without it fused AdamW would be compared with fused AdamW. Shown in the
# record's baseline beside the variant's (``_shown``). ``refuse_same_sides`` catches one missed.
BASELINE_ARGS = {"pin-memory": {"dataloader_pin_memory": False}, "fused-adamw": {"optim": "adamw_torch"}}


# Claims whose sides differ beyond their TrainingArguments (dynamic padding's collator, ``_trainer``).
BEYOND_ARGS = ("dynamic-padding",)


class SameSides(ValueError):
    """A claim's two sides resolve to the same TrainingArguments: nothing would be compared."""


def resolved(kwargs: dict) -> dict:
    """``kwargs`` as the installed TrainingArguments resolves them (its defaults and what its
    ``__post_init__`` decides filled in), as ``to_dict`` gives them; ``logging_dir``, which
    transformers 4.x stamps with the time it is made, left out."""
    from transformers import TrainingArguments
    out = TrainingArguments(**kwargs).to_dict()
    out.pop("logging_dir", None)
    return out


def refuse_same_sides(name: str, setup: Setup, device: str, out_dir: str) -> None:
    """Raise SameSides where the two sides of ``name`` resolve to the same TrainingArguments
    (``resolved``) and train the same data the same way: the ratio would be of a run against
    itself, 1.0 whatever the technique does, and the claim is not judged."""
    a, b = (arguments(name, variant, setup, device, out_dir) for variant in (False, True))
    if name not in BEYOND_ARGS and resolved(a) == resolved(b):
        raise SameSides(f"{name} through the Trainer: the baseline ({_shown(a)}) and the variant ({_shown(b)}) "
                        "resolve to the same TrainingArguments with this transformers, so the run would be compared "
                        "with itself and is not judged; set the baseline's differing argument explicitly "
                        "(harness/optim/trainer_runs.py BASELINE_ARGS)")


def arguments(name: str, variant: bool, setup: Setup, device: str, out_dir: str) -> dict:
    """The TrainingArguments kwargs of one side of a claim. A loading claim (LOADING_CLAIMS)
    trains LOADING_STEPS steps on its text (``remove_unused_columns=False``: the Trainer would
    otherwise drop the text column the transform tokenizes), its workers persistent
    (``kept_loader``)."""
    base = {"output_dir": out_dir, "per_device_train_batch_size": setup.batch,
            "max_steps": LOADING_STEPS if name in LOADING_CLAIMS else STEPS,
            "learning_rate": 1e-4, "seed": SEED, "report_to": [], "save_strategy": "no", "logging_strategy": "no",
            "disable_tqdm": True, "use_cpu": devices.place(device).split(":")[0] == "cpu", "dataloader_num_workers": 0}
    ga = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": setup.batch}
    if name in ("gradient-checkpointing",):  # seed 003's previous row: batch 1, accumulation
        base.update(ga)
    base.update(BASELINE_ARGS.get(name, {}))
    if name in LOADING_CLAIMS:
        base["remove_unused_columns"] = False
    if not variant:
        return base
    flags = claims.trainer_kwargs(name)
    if name == "gradient-accumulation":
        flags = ga
    if name in LOADING_CLAIMS:
        flags = {**flags, "dataloader_persistent_workers": True}
    return {**base, **flags}


def _trainer(name: str, variant: bool, setup: Setup, device: str, out_dir: str):
    from transformers import PrinterCallback, Trainer, TrainingArguments
    kwargs = arguments(name, variant, setup, device, out_dir)
    dynamic = variant and name == "dynamic-padding"
    initial_weights(setup)   # kept by the process, outside the target's context
    with devices.on_device(device):   # the model is made on the target, as the Trainer then places it
        model = build_model(setup)
        data = (text_dataset(setup, setup.batch * LOADING_STEPS) if name in LOADING_CLAIMS else dataset(setup))
        trainer = Trainer(model=model, args=TrainingArguments(**kwargs), train_dataset=data,
                          data_collator=collator(None if dynamic else setup.seq))
    trainer.remove_callback(PrinterCallback)  # its metrics print would land in the suite's output
    if name in LOADING_CLAIMS:
        kept_loader(trainer)
    watch_loss(trainer)
    return trainer


def watch_loss(trainer) -> None:
    """Keep, beside ``trainer``, whether any of its training steps' losses was NaN or inf, and
    the last one (``training_loss``): the Trainer's own training loss leaves NaN steps out by
    default (TrainingArguments.logging_nan_inf_filter), which would hide a technique that
    breaks training (harness.optim.techniques.breaks_training). The flag stays on the device
    until it is read after ``train()``: no synchronisation inside a timed step. The
    Trainer's loop is unchanged; its ``training_step`` is wrapped on this instance only."""
    import torch
    step = trainer.training_step
    seen = {"bad": None, "last": None}

    def training_step(*args, **kwargs):
        loss = step(*args, **kwargs)
        if isinstance(loss, torch.Tensor):
            value = loss.detach()
            bad = ~torch.isfinite(value).all()
            seen["bad"] = bad if seen["bad"] is None else seen["bad"] | bad
            seen["last"] = value
        return loss
    trainer.training_step = training_step
    setattr(trainer, SEEN, seen)   # on the trainer: it goes when the trainer goes


SEEN = "mps_compat_losses_seen"


def training_loss(trainer) -> float | None:
    """``trainer``'s last training step's loss as ``watch_loss`` kept it: NaN where any step's was
    NaN or inf, None where no step ran (or the trainer is not watched)."""
    import math
    seen = getattr(trainer, SEEN, None)
    if not seen or seen["last"] is None:
        return None
    return math.nan if bool(seen["bad"]) else float(seen["last"].float().mean())


def on_target(run, device: str):
    """``run`` (a trainer's ``train``, or a tracked run of it) called inside the target's context."""
    def call(*args):
        with devices.on_device(device):
            return run(*args)
    return call


def measure_trainer_claim(name: str, quantity: str, device: str, scale: str = "small") -> ClaimRun:
    """One claim's quantity through the Trainer: ratio, verdict, and the arguments used."""
    from harness.optim import measure
    claim = claims.by_name(name)
    kind = techniques.rules_of(device)
    expect = claim.expect(quantity)[kind]
    setup = SCALES[scale].but(dropout=True)
    bound = Bound(expect.kind, claims.holds_bound(claim, quantity, kind))
    fields = {"claim": name, "quantity": quantity, "kind": expect.kind, "bound": bound.limit,
              "claimed_ratio": claims.expected_ratio(claim, quantity, kind), "source": expect.source,
              "baseline": _shown(arguments(name, False, setup, device, "")),
              "variant": _shown(arguments(name, True, setup, device, "")), "basis": expect.basis}
    with tempfile.TemporaryDirectory(prefix="mps-compat-trainer-") as tmp:
        refuse_same_sides(name, setup, device, tmp)
        if quantity == "memory":  # the claim is about the step's peak, or about the optimizer state alone
            ma, state_a = baseline_memory(name, setup, device, tmp)
            tb = _trainer(name, True, setup, device, tmp)
            mb = weighed_train(tb, device, dynamic=name == "dynamic-padding")
            a, b = ((state_a, measure.state_bytes(tb.optimizer.state))
                    if expect.basis == "optimizer-state" else (ma["peak_bytes"], mb["peak_bytes"]))
            found = ratios.compare_memory(a, b, bound)
            found.update(peak_phase_a=ma["peak_phase"], peak_phase_b=mb["peak_phase"],
                         anatomy_a=techniques.anatomy_of(ma), anatomy_b=techniques.anatomy_of(mb),
                         peak=techniques.peak_story(name, ma, mb))
            found.update({f"micro_batches_weighed_{side}": m["micro_batches_weighed"]
                          for side, m in (("a", ma), ("b", mb)) if m.get("micro_batches_weighed")})
            found.update(loss_a=ma.get("loss"), loss_b=mb.get("loss"))
        else:  # STEPS optimizer steps over the same samples on each side: the raw ratio is per sample
            ta, tb = _trainer(name, False, setup, device, tmp), _trainer(name, True, setup, device, tmp)
            per = ta.args.per_device_train_batch_size * ta.args.gradient_accumulation_steps / (
                tb.args.per_device_train_batch_size * tb.args.gradient_accumulation_steps)
            found = ratios.compare_time(on_target(ta.train, device), on_target(tb.train, device), bound.scaled(per),
                                        sync=devices.synchronizer(device),
                                        budget_s=TIME_BUDGET_S[scale], rounds=TIME_ROUNDS[scale], warmup=1)
            for key in ("time_ratio", "ci_low", "ci_high"):
                found[key] *= per
            found.update(loss_a=training_loss(ta), loss_b=training_loss(tb))   # NaN if any round's step was
            if name in LOADING_CLAIMS:
                found.update(loading_bottleneck(ta, device, found, workers=tb))
    return techniques.claim_run(found, **fields)


LOADING_REPEATS = 5   # timings of the baseline's loader alone, of which the median is kept


def loading_seconds(trainer) -> float:
    """The median seconds (of LOADING_REPEATS) that loading one ``train()`` call's batches takes
    in the main process: ``trainer``'s own DataLoader (the baseline's: no workers), iterated for
    the call's max_steps x gradient_accumulation_steps batches, with whatever it does to them
    (accelerate's placement on the device included), and no training."""
    import statistics
    import time
    n = trainer.args.max_steps * trainer.args.gradient_accumulation_steps
    times = []
    for _ in range(LOADING_REPEATS):
        loader = trainer.get_train_dataloader()
        start = time.perf_counter()
        for _batch, _ in zip(loader, range(n)):
            pass
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def start_method(trainer) -> str | None:
    """How ``trainer``'s DataLoader workers start, as the Trainer resolves it: its arguments'
    ``dataloader_multiprocessing_context`` where set (transformers sets 'fork' itself on MPS
    with two or more workers: training_args.py, "MPS requires forking if multiple workers are
    specified"), else torch's default (macOS: 'spawn', Linux: 'fork'); None without workers."""
    args = trainer.args
    if not getattr(args, "dataloader_num_workers", 0):
        return None
    said = getattr(args, "dataloader_multiprocessing_context", None)
    if said:
        return str(said)
    import torch.multiprocessing as mp
    return mp.get_start_method(allow_none=True) or mp.get_context().get_start_method()


def loading_bottleneck(baseline, device: str, found: dict, workers=None) -> dict:
    """What a loading claim's record keeps of its loader (``loading``: the baseline's batches of a
    call loaded alone, the call's median seconds, the share), and, where that share is under
    techniques.LOADING_BOTTLENECK and the claim did not hold anyway, the claim left unjudged:
    the document makes it for a loader that is the bottleneck, and one that takes a small share
    of a step leaves the workers nothing to hide (their start-up, a new set of processes per
    ``train()``, is then what the ratio measures: on the H100, 1.7 s against 1.3 s)."""
    load = on_target(loading_seconds, device)(baseline)
    call = found["median_a_s"]
    loading = {"load_s": round(load, 6), "call_s": round(call, 6), "share": round(load / call, 4) if call else None}
    startup = workers_startup(found)
    if startup is not None:
        loading["startup_s"] = round(startup, 4)
    method = start_method(workers) if workers is not None else None
    if method:
        loading["start_method"] = method   # what the start-up was paid for: spawn pickles, fork copies
    out = {"loading": loading}
    if loading["share"] is not None and loading["share"] < techniques.LOADING_BOTTLENECK \
            and found["category"] != Category.HOLDS:
        out.update(category=Category.INCONCLUSIVE, stopped=techniques.NOT_THE_BOTTLENECK)
    return out


def workers_startup(found: dict) -> float | None:
    """About how long the variant's workers take to start (the seconds its first, warm-up call
    spent beyond its timed calls' median, less the baseline's own first-call excess), where
    compare_time kept the warm-ups: what a user pays once per ``train()`` with persistent
    workers, or once per epoch without them (more where they start with 'spawn': ``start_method``)."""
    wa, wb = found.get("warmup_a_s") or [], found.get("warmup_b_s") or []
    if not (wa and wb and found.get("median_a_s") and found.get("median_b_s")):
        return None
    return (wb[0] - found["median_b_s"]) - (wa[0] - found["median_a_s"])


def tracked_micro_batches(trainer, dynamic: bool) -> int | None:
    """How many of each accumulated step's first micro-batches a tracked ``train()`` sees
    (``labelled_train``), the step's last one and everything between steps always among them:
    harness.optim.measure.WEIGH_MICRO_BATCHES when the step accumulates more than one beyond
    them, None (all) otherwise, and with dynamic padding, where each micro-batch has its own
    width. The micro-batches left out repeat the second's peak and leave what it left (the
    collator pads every one to ``seq``), as the plain loop's weighed step does."""
    from harness.optim import measure
    if dynamic or trainer.args.gradient_accumulation_steps <= measure.WEIGH_MICRO_BATCHES + 1:
        return None
    return measure.WEIGH_MICRO_BATCHES


def weighed_train(trainer, device: str, dynamic: bool = False) -> dict:
    """One side of a memory claim through the Trainer: harness.optim.measure.measure_memory of
    its labelled ``train()`` (``measured_train``), and, where the tracker skipped repeated
    micro-batches (``tracked_micro_batches``), which it saw: ``micro_batches_weighed``
    ("3 of 32 in each step")."""
    from harness.optim import measure
    m = measure.measure_memory(measured_train(trainer, device, dynamic), resident=resident_of(trainer.model),
                               labelled=True)
    m["loss"] = training_loss(trainer)
    first = tracked_micro_batches(trainer, dynamic)
    if first is not None:
        m["micro_batches_weighed"] = f"{first + 1} of {trainer.args.gradient_accumulation_steps} in each step"
    return m


def measured_train(trainer, device: str, dynamic: bool = False):
    """The labelled ``train`` of one side of a memory claim, on the target, from the Trainer's
    seed: its RandomSampler shuffles with torch's global generator, which the Trainer seeds
    only when it is made, so without this each side's batches would depend on what ran
    before it (dynamic padding's peak follows the longest row of each batch). Both sides,
    and a kept baseline, draw the same batches."""
    from transformers import set_seed
    run = on_target(labelled_train(trainer, tracked_micro_batches(trainer, dynamic)), device)

    def seeded(*args):
        set_seed(trainer.args.seed)
        return run(*args)
    return seeded


_BASELINES: dict[tuple, tuple[dict, int]] = {}


def baseline_memory(name: str, setup: Setup, device: str, out_dir: str) -> tuple[dict, int]:
    """The baseline side of a memory claim through the Trainer: the tracked peak over its
    ``train()`` (harness.optim.measure.measure_memory, labelled) and its optimizer state's
    bytes. Most claims share one baseline (the same TrainingArguments), and tracked bytes
    repeat for the same run, so it is measured once per process for its arguments, the
    workload key (harness.optim.workloads.key_of: setup, target, torch settings) and the
    dataset's shape."""
    from harness.optim import measure
    shown = arguments(name, False, setup, device, "")
    key = (tuple(sorted((k, repr(v)) for k, v in shown.items())), key_of(setup, device), EXAMPLES, STEPS)
    if key not in _BASELINES:
        trainer = _trainer(name, False, setup, device, out_dir)
        _BASELINES[key] = (weighed_train(trainer, device), measure.state_bytes(trainer.optimizer.state))
    return _BASELINES[key]


def forget_baselines() -> None:
    """Drop every kept baseline (the next ``baseline_memory`` measures again)."""
    _BASELINES.clear()


def labelled_train(trainer, micro_batches: int | None = None):
    """``trainer.train`` that tells a harness.optim.measure tracker its phases and what it creates:
    the model's forward (its saved tensors filed as activations), the backward (from the
    loss's gradient on), the optimizer step (gradients, then the optimizer's state); through
    a forward pre-hook and hook on the model and a TrainerCallback, so the Trainer's own
    loop runs unchanged.

    ``micro_batches`` (``tracked_micro_batches``): the tracker sees only that many of each
    step's first micro-batches and its last one (forward and backward), pausing between
    them (``MemoryTracker.pause``) and adopting the gradients when it resumes; None: all.
    An accumulated step of 32 micro-batches is then tracked over 3."""
    import torch
    from transformers import TrainerCallback

    def run(tracker):
        saving = []
        begun = [0]   # micro-batches begun in this optimizer step

        def grads():
            return [p.grad for p in trainer.model.parameters() if p.grad is not None]

        def before_forward(module, args, kwargs=None):
            # the micro-batch's inputs: the Trainer fetched every micro-batch of the step at once
            # (Trainer.get_batch_samples), so until its turn each is a batch held, nothing more
            tracker.label("batch", [args, kwargs or {}])
            index, begun[0] = begun[0], begun[0] + 1
            last = getattr(trainer, "current_gradient_accumulation_steps", 0) - 1
            if micro_batches is not None and micro_batches <= index < last and tracker.pause():
                return   # a repeat of what was counted: unseen, nothing labelled
            tracker.resume(grads())
            tracker.mark("forward")
            ctx = torch.autograd.graph.saved_tensors_hooks(activations_labeller(tracker), lambda t: t)
            ctx.__enter__()
            saving.append(ctx)

        def after_forward(module, args, output):
            while saving:
                saving.pop().__exit__(None, None, None)
            loss = getattr(output, "loss", None)
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.register_hook(lambda grad: tracker.mark("backward") or grad)

        class Phases(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                begun[0] = 0

            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                tracker.label("gradients", [p.grad for p in trainer.model.parameters() if p.grad is not None])
                tracker.mark("optimizer")

            def on_optimizer_step(self, args, state, control, **kwargs):
                tracker.label("optimizer_state", [trainer.optimizer.state])

        model = trainer.model
        hooks = [model.register_forward_pre_hook(before_forward, with_kwargs=True),
                 model.register_forward_hook(after_forward)]
        phases = Phases()
        trainer.add_callback(phases)
        try:
            return trainer.train()
        finally:
            tracker.resume()   # never left paused: the tracker's own exit leaves torch's stack
            for hook in hooks:
                hook.remove()
            trainer.remove_callback(phases)
    return run


def _shown(kwargs: dict) -> str:
    skip = {"output_dir", "report_to", "save_strategy", "logging_strategy", "disable_tqdm", "seed", "learning_rate"}
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k not in skip)
