"""Whole-model parity on the inputs users get burned by: padded batches, prompts of
different lengths, and a long KV cache.

The float32 checks (harness.parity.models.runs) read the dataset's rows padded to a fixed
length on the right, and continue unpadded prompts. What users report breaking is
elsewhere: NaNs in half precision once an attention mask hides something
(pytorch#182726, transformers#40858), grouped-query attention mapping heads wrongly, and
decoding that goes wrong once the KV cache is long. So these inputs:

  padded batch   four sentences tokenised by the MiniLM tokenizer and padded to the longest
                 (``padding=True``, as ``DataCollatorWithPadding`` does), on the right for the
                 encoders and T5's encoder, on the LEFT for the decoder-only models (what
                 batched generation needs, and where a query row can see nothing but padding);
                 the last row is "Yes.", 4 real tokens of 16: mostly padding
  prompts        batched greedy generation from prompts of 9, 6, 4 and 2 tokens, left-padded
                 (decoder-only), or the padded sentences as T5's encoder input
  long prompt    one sequence of ``long_tokens`` seeded tokens (1,024 on the CPU), so greedy
                 decoding reads a KV cache at least that long; the tiny decoders are rebuilt
                 with as many positions (``long_model``), their other settings as registered
  long padded    two seeded prompts of LONG_PADDED_LENGTHS tokens, left-padded to the longer
                 (``long_padded_prompts``): a prefill of more query rows than one of MPS's
                 64-row query blocks, padding rows fully masked, then decoding

The checks whose point is the attention path (sdpa against eager, the cache against
recomputation, greedy generation under autocast) run the models rebuilt with a head dim of
64 (``kernel_model``, KERNEL_SETTINGS): the registry's tiny models have head dims of 16 (8
for Llama), which none of MPS's own attention kernels take, so on a Mac those checks only
ever ran MPSGraph's general path. The registry itself (harness/core/models.py) is left as
it is: the optimization and perf suites time its models and compare them by shape.

Only the positions that mean something are compared (``real_positions``): a padded
position's output is whatever the kernel leaves there, and no user reads it. Its effect on
what users do read (the loss, the gradients, the real tokens) is compared in full, so a NaN
born at a padded position and carried into the gradients is caught.

The float32 runs on these inputs are here too (``forward_backward``, ``generate``), made
with harness.parity.models.runs' machinery and judged as its runs are; the half-precision
runs are harness.parity.models.precision's, the other references harness.parity.models.references'.
"""
from __future__ import annotations

import copy

from harness.core import models
from harness.env import devices
from harness.parity.models import runs
from harness.parity.models.judge import GenerationRun, StepRun

MAX_LENGTH = 16
# (sentence, label): the first fills MAX_LENGTH, the last is mostly padding. For MiniLM the
# rows pair up as models.minilm_loss reads them (row i with row i + 2). BERT's labels are not
# balanced on purpose: a random classifier head gives every row p = 0.5 +- 0.003, so with two
# rows of each label its bias gradient is a sum of four +-0.125 terms that cancels to 1.5e-3,
# and bfloat16, whose spacing there is 2^-10, missed float64 by 35% on it (measured): a
# cancellation the dtype cannot hold, not a kernel's fault. One positive row keeps the sum 0.25.
PADDED_SENTENCES = (
    ("The quick brown fox jumps over the lazy dog near the river bank this morning.", 1),
    ("A dog runs across the park.", 0),
    ("Rain is expected this weekend.", 0),
    ("Yes.", 0),
)
LEFT_PADDED = ("gpt2", "llama")          # decoder-only: padded on the left
PROMPT_LENGTHS = (9, 6, 4, 2)            # tokens per prompt of the batched generation (decoder-only)


def padding_side(name: str) -> str:
    """"left" for the decoder-only models, "right" for the encoders and T5."""
    return "left" if name in LEFT_PADDED else "right"


def padded_rows(name: str, side: str | None = None) -> dict:
    """PADDED_SENTENCES tokenised and padded to the longest on ``side`` (by default
    ``padding_side(name)``): input_ids, attention_mask, label (tensors)."""
    import torch
    tokenizer = models.minilm_tokenizer()
    enc = tokenizer([s for s, _ in PADDED_SENTENCES], padding=True, truncation=True, max_length=MAX_LENGTH,
                    return_tensors="pt", padding_side=side or padding_side(name))
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
            "label": torch.tensor([label for _, label in PADDED_SENTENCES])}


def positions_of(mask):
    """Position ids of left-padded rows, as ``generate`` makes them: counted from each row's
    first real token; padding gets 1, a position it never uses."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


def padded_batch(name: str, model) -> dict:
    """Forward keyword arguments (labels included) for model ``name`` from the padded rows.

    A left-padded decoder also gets its position ids (``positions_of``), as generation gives
    them (without, GPT-2's real tokens would start at the position the padding took), and
    its first real token no label: a causal LM's token t + 1 is predicted from position t,
    so with left padding the first real token would be predicted from the last padding
    position, whose output is whatever the kernel leaves in a row that sees nothing.
    Measured, labels masked at the padding only: that one term made sdpa's and eager's
    losses differ by 1.1e-3 (the tiny Llama: 6.2413 against 6.2482) and GPT-2's attention
    output projection gradients by 93%, on a correct CPU.
    """
    batch = runs.model_batch(name, model, padded_rows(name))
    if padding_side(name) == "left":
        mask = batch["attention_mask"]
        batch["position_ids"] = positions_of(mask)
        first = (mask.cumsum(-1) == 1) & (mask == 1)
        batch["labels"] = batch["labels"].masked_fill(first, -100)
    return batch


def real_positions(name: str, model, batch: dict):
    """Which elements of the main output mean something, as a boolean mask over its leading
    dimensions, or None where every element does (a sequence classifier's logits): the
    tokens the attention mask keeps, or T5's decoder positions that have a label."""
    if type(model).__name__.endswith("ForSequenceClassification"):
        return None
    if model.config.is_encoder_decoder:
        return batch["labels"] != -100
    return batch["attention_mask"].bool()


def prompt_batch(name: str, model) -> dict:
    """Generation inputs of different lengths: T5 reads the padded sentences (its encoder
    input, right-padded); a decoder-only model continues each sentence's first
    PROMPT_LENGTHS tokens, left-padded to the longest."""
    import torch
    if model.config.is_encoder_decoder:
        batch = runs.model_batch(name, model, padded_rows(name))
        batch.pop("labels", None)
        return batch
    rows = padded_rows(name, "right")  # every row's real tokens first
    ids = runs.model_batch(name, model, rows)["input_ids"]
    width = max(PROMPT_LENGTHS)
    out_ids = torch.zeros(len(PROMPT_LENGTHS), width, dtype=ids.dtype)
    mask = torch.zeros(len(PROMPT_LENGTHS), width, dtype=torch.long)
    for row, length in enumerate(PROMPT_LENGTHS):
        out_ids[row, width - length:] = ids[row, :length]
        mask[row, width - length:] = 1
    return {"input_ids": out_ids, "attention_mask": mask}


# --------------------------------------------------------------------------- head dims MPS's kernels take

# The head dims torch's MPS attention kernels are built for (harness.parity.properties.attention
# has where they were read): decoding, at most 8 query rows against as many keys or more
# (sdpa_vector, sdpa_vector_2pass from 1024 keys), and prefill, more rows (the half-precision
# kernel on Metal's performance primitives takes the decoding kernels' list).
MPS_DECODE_HEAD_DIMS = (64, 96, 128, 256)
MPS_PREFILL_HEAD_DIMS = (32, 64, 72, 80, 96, 128, 256)
KERNEL_HEAD_DIM = 64
# name -> the config settings that give the registry's model a head dim of KERNEL_HEAD_DIM,
# its number of heads and layers kept: BERT and GPT-2 derive the head dim from the width
# (2 heads of 64: hidden 128), T5 and Llama have it as a setting of its own.
KERNEL_SETTINGS = {"bert": {"hidden_size": 128}, "gpt2": {"n_embd": 128}, "t5": {"d_kv": KERNEL_HEAD_DIM},
                   "llama": {"head_dim": KERNEL_HEAD_DIM}}


def head_dim(model) -> int:
    """The head dim of ``model``'s attention, from its config."""
    config = model.config
    if getattr(config, "head_dim", None):
        return int(config.head_dim)
    if getattr(config, "d_kv", None):
        return int(config.d_kv)
    return int(config.hidden_size // config.num_attention_heads)


def _rebuilt(name: str, attn_implementation: str, settings: dict):
    """Model ``name`` of the registry with ``settings`` on its config, built seeded like the
    registry's: every side of a check builds the same weights."""
    base = models.MODELS[name].make(attn_implementation=attn_implementation)
    config = copy.deepcopy(base.config)
    for key, value in settings.items():
        setattr(config, key, value)
    with models.seeded():
        return type(base)(config)


def kernel_model(name: str, attn_implementation: str = "sdpa", positions: int = 0):
    """Model ``name`` with a head dim of KERNEL_HEAD_DIM (KERNEL_SETTINGS) and room for
    ``positions`` positions, for the checks whose point is the attention path; the pretrained
    MiniLM, whose head dim is its own (32), as registered."""
    if name not in KERNEL_SETTINGS:
        return models.MODELS[name].make(attn_implementation=attn_implementation)
    settings = dict(KERNEL_SETTINGS[name])
    base = models.MODELS[name].make(attn_implementation=attn_implementation)
    for key in ("n_positions", "max_position_embeddings"):
        if hasattr(base.config, key):
            settings[key] = max(positions, getattr(base.config, key))
    return _rebuilt(name, attn_implementation, settings)


# --------------------------------------------------------------------------- a long KV cache

LONG_DECODERS = ("gpt2", "llama")
LONG_LADDER = (1024, 2048, 4096, 8192)   # prompt lengths, smallest first
LONG_TOKENS_CPU = LONG_LADDER[0]         # the CPU and the stand-ins: time, not memory, bounds them
LONG_NEW_TOKENS = 4                      # greedy steps decoded against the long cache
MEMORY_FRACTION = 0.25                   # of a memory reading, for the attention of one long forward
ATTENTION_BUFFERS = 3                    # scores, probabilities and one more of (heads, L, L) alive at once
LONG_HEADS = 4                           # the most query heads of a long model (llama)


def attention_bytes(length: int, itemsize: int) -> int:
    """What one long forward holds at its peak, about: ATTENTION_BUFFERS (1, heads, L, L)
    tensors, as the eager kernel and sdpa's math kernel materialise them (the weights of the
    tiny models are a few hundred KB)."""
    return ATTENTION_BUFFERS * LONG_HEADS * length * length * itemsize


def long_tokens(target: str, host_side: bool = True, memory=None) -> tuple[int, str]:
    """The prompt length of the long checks on ``target``, and why.

    The CPU and the stand-ins (which compute on the CPU) take LONG_TOKENS_CPU: they run
    every side of a check, float64 included, on 2 cores. An accelerator takes the longest of
    LONG_LADDER whose ``attention_bytes`` in float32 fits MEMORY_FRACTION of its memory
    reading (harness.env.devices.memory_of) and, where a check also runs the CPU's float32
    and float64 sides (``host_side``), whose float64 attention fits that fraction of the
    CPU's reading too. ``memory(device)`` replaces the readings (self-tests).
    """
    if devices.kind_of(target) in ("cpu", "stand-in"):
        return LONG_TOKENS_CPU, (f"{LONG_TOKENS_CPU} tokens: the CPU and the stand-ins run every side of a check, "
                                 "float64 included, on a few cores: the shortest length of the ladder")
    memory = memory or devices.memory_of
    dev_bytes, dev_how = memory(target)
    host_bytes, host_how = memory("cpu") if host_side else (None, "")
    for length in reversed(LONG_LADDER):
        if attention_bytes(length, 4) > MEMORY_FRACTION * dev_bytes:
            continue
        if host_side and attention_bytes(length, 8) > MEMORY_FRACTION * host_bytes:
            continue
        host = (f" and its float64 reference {attention_bytes(length, 8) / 2**30:.2g} GiB within "
                f"{MEMORY_FRACTION:.0%} of {host_bytes / 2**30:.3g} GiB ({host_how})") if host_side else ""
        return length, (f"{length} tokens: attention {attention_bytes(length, 4) / 2**30:.2g} GiB within "
                        f"{MEMORY_FRACTION:.0%} of {dev_bytes / 2**30:.3g} GiB ({dev_how}){host}")
    return LONG_LADDER[0], (f"{LONG_LADDER[0]} tokens: no longer prompt fits {MEMORY_FRACTION:.0%} of the memory "
                            f"readings ({dev_bytes / 2**30:.3g} GiB, {dev_how})")


def long_model(name: str, attn_implementation: str, positions: int, kernel_heads: bool = False):
    """Decoder ``name`` of the registry with room for ``positions`` positions (GPT-2's
    ``n_positions``, Llama's ``max_position_embeddings``), built seeded like the registry's;
    with ``kernel_heads``, with a head dim of KERNEL_HEAD_DIM too (``kernel_model``).

    Its other settings are the registry's; its weights are not (a larger position table
    draws more numbers from the seeded stream), but every side of a check builds the same.
    """
    if kernel_heads:
        return kernel_model(name, attn_implementation, positions)
    base = models.MODELS[name].make(attn_implementation=attn_implementation)
    settings = {key: max(positions, getattr(base.config, key)) for key in ("n_positions", "max_position_embeddings")
                if hasattr(base.config, key)}
    return _rebuilt(name, attn_implementation, settings)


# Two prompts, left-padded to the longer: 193 rows cross three 64-row query blocks (and six of
# 32), the shorter row's 63 padding positions are fully masked query rows in the prefill.
LONG_PADDED_LENGTHS = (193, 130)


def long_padded_prompts(model, lengths: tuple[int, ...] = LONG_PADDED_LENGTHS, seed: int = models.SEED) -> dict:
    """Seeded prompts of ``lengths`` tokens, left-padded to the longest (ids 0 and mask 0 at
    the padding), as batched generation takes them."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, width - length:] = torch.randint(3, model.config.vocab_size, (length,), generator=gen)
        mask[row, width - length:] = 1
    return {"input_ids": ids, "attention_mask": mask}


def long_prompt(model, length: int, seed: int = models.SEED) -> dict:
    """One sequence of ``length`` seeded token ids (no padding): the prompt whose KV cache the
    long checks decode against."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (1, length), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


# --------------------------------------------------------------------------- float32 runs on these inputs

def padded_step(name: str, base, side):
    """One forward and backward pass of ``base`` on the padded batch on one side (its
    autocast too), the output at the real positions (``runs.step``)."""
    return runs.step(name, base, lambda model: padded_batch(name, model), side,
                     lambda model, batch: real_positions(name, model, batch))


def forward_backward(name: str, target: str, out_tol, grad_tol) -> StepRun:
    """``runs.forward_backward`` on the padded batch: float32 against float64, the output at
    the real positions, the loss and every gradient."""
    base = models.MODELS[name].make()
    return runs.compare_steps(name, target, lambda side: padded_step(name, base, side), out_tol, grad_tol)


def generate(name: str, target: str, out_tol, new_tokens: int = runs.NEW_TOKENS, long: bool = False) -> GenerationRun:
    """``runs.generate`` from the left-padded prompts of different lengths (T5: its padded
    encoder input), or (``long``) from one prompt of ``long_tokens`` tokens, so decoding
    reads a KV cache that long."""
    if long:
        length, why = long_tokens(target)
        base = long_model(name, "sdpa", length + new_tokens)
        setting = {"long_tokens": length, "long_tokens_reason": why, "kv_cache_tokens": length + new_tokens - 1}

        def prompt_of(model):
            return long_prompt(model, length)
    else:
        base = models.MODELS[name].make()
        setting = {"inputs": "prompts of different lengths, padded (on the left for a decoder-only model)"}

        def prompt_of(model):
            return prompt_batch(name, model)

    def greedy_of(side):
        model = runs.place(copy.deepcopy(base), side)
        return runs.greedy(model, prompt_of(model), side, new_tokens)
    result = runs.compare_generations(name, target, greedy_of, out_tol, new_tokens)
    result.setting = setting
    return result
