"""The inputs of whole-model parity: the sentences, their tokenised dataset and each model's batch.

Inputs are prepared as a user's training script prepares them: a ``datasets.Dataset`` of
short sentences, tokenised by ``map(..., batched=True)`` with the MiniLM tokenizer (BERT
WordPiece), padded to ``MAX_LENGTH``, ``set_format("torch")``. Every side of a check
(harness.parity.model_parity) reads the same rows: the forward/backward check and greedy
generation the first ``BATCH``, the training check a seeded draw per step
(``training_rows``).
"""
from __future__ import annotations

from harness.core import models

MAX_LENGTH = models.SEQ   # tokens per sentence after padding / truncation
BATCH = 4                 # sentences per batch
DATA_SEED = 0             # which rows make each training batch
PROMPT_TOKENS = 6         # decoder-only prompts: the first tokens of each sentence, unpadded

# (sentence, label); label 1 when the sentence is about an animal (BERT's classification
# target). The first four are MiniLM's pairs in models.minilm_batch order, so the batch the
# forward/backward check uses gives the pretrained model its own similarity loss, meaning intact.
SENTENCES = (
    ("A man is playing a guitar.", 0),
    ("The cat sleeps on the sofa.", 1),
    ("Someone plays an instrument.", 0),
    ("Stock prices fell sharply today.", 0),
    ("A dog runs across the park.", 1),
    ("The train leaves at noon.", 0),
    ("Birds sing in the early morning.", 1),
    ("She reads a book by the window.", 0),
    ("The horse jumped over the fence.", 1),
    ("Rain is expected this weekend.", 0),
    ("A fish swims in the clear lake.", 1),
    ("He cooks dinner for his friends.", 0),
)


def dataset():
    """SENTENCES as a tokenised ``datasets.Dataset`` in torch format, built in memory.

    ``keep_in_memory`` and a fixed fingerprint: no cache file is written (a fresh clone
    stays clean) and the tokenizer is not hashed to name one.
    """
    from datasets import Dataset
    tokenizer = models.minilm_tokenizer()

    def tokenize(rows):
        return tokenizer(rows["text"], padding="max_length", truncation=True, max_length=MAX_LENGTH)

    data = Dataset.from_dict({"text": [s for s, _ in SENTENCES], "label": [label for _, label in SENTENCES]})
    data = data.map(tokenize, batched=True, keep_in_memory=True, new_fingerprint="model-parity-minilm-tokenized")
    data.set_format("torch", columns=["input_ids", "attention_mask", "label"])
    return data


def training_rows(steps: int, seed: int = DATA_SEED) -> list[list[int]]:
    """Which dataset rows make each training batch: a seeded draw per step, the same on every side."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    return [torch.randperm(len(SENTENCES), generator=gen)[:BATCH].tolist() for _ in range(steps)]


def model_batch(name: str, model, rows: dict) -> dict:
    """Forward keyword arguments for model ``name`` from tokenised rows (labels included).

    The tiny models have a 512-token vocabulary and the tokenizer's ids go up to 30521, so
    the ids are folded in (``id % vocab_size``) rather than the models rebuilt with a 30522
    vocabulary: they stay the registry's models (the weights the op audit runs) and small.
    [PAD] 0, [CLS] 101 and [SEP] 102 are below 512 and stay themselves; word ids that
    collide after folding are harmless, since parity needs the same tokens on every side,
    not meaningful ones. The pretrained MiniLM gets the ids as tokenised.
    """
    spec = models.MODELS[name]
    ids, mask = rows["input_ids"], rows["attention_mask"]
    if not spec.pretrained:
        ids = ids % model.config.vocab_size
    batch = {"input_ids": ids, "attention_mask": mask}
    if spec.loss_fn is not None:  # MiniLM: the loss comes from the registry's loss function
        return batch
    if type(model).__name__.endswith("ForSequenceClassification"):
        batch["labels"] = rows["label"]
    elif model.config.is_encoder_decoder:  # T5: learn to copy the sentence's first tokens
        batch["labels"] = ids[:, :models.TARGET_SEQ].masked_fill(mask[:, :models.TARGET_SEQ] == 0, -100)
    else:  # causal LM: the inputs themselves, padding ignored
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    return batch


def prompts(name: str, model, rows: dict) -> dict:
    """Generation inputs: an encoder-decoder reads whole sentences (padding masked); a
    decoder-only model continues the first PROMPT_TOKENS tokens (no padding, so no
    left-padding question arises)."""
    batch = model_batch(name, model, rows)
    batch.pop("labels", None)
    if not model.config.is_encoder_decoder:
        batch = {k: v[:, :PROMPT_TOKENS] for k, v in batch.items()}
    return batch
