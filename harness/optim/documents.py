"""The documents the optimization claims come from, and how user-facing text names and quotes them.

The claims (harness/optim/claims.py) come from five documents written in Chinese, kept as
numbered files (tests/fixtures/seeds/NNN_<hash>.txt, the project's copies of its source documents). The file name is
where a claim's words are looked up (tests/test_claims.py); it is never what a user reads.
``DOCUMENTS`` maps each file to its titles, the one place that does: ``short`` is the
name a sentence uses ("HF guide ... : ..."), ``title`` the full English title a skip
message or a record's ``document`` metric gives, ``original`` the document's own title as
it stands in the file, with ``original_en`` its English.

A Chinese quote shown to users carries its English beside it, always in one form,
``glossed``: ``"梯度累积" (gradient accumulation)``. ``unglossed`` finds what breaks that
rule in a string (CJK text outside such a pair), ``file_names`` a seed file name, and
``jargon`` the word "seed", which is this code's name for a document, not a user's: the
self-tests run all three over every user-facing string of every claim.
"""
from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType

# The seed documents, by number: the file names in tests/fixtures/seeds/ (its README gives
# their SHA-256s).
SEED_000 = "000_d9db61ef21f62cee.txt"   # ChatGPT-4 advice for training on a MacBook M3 (blog)
SEED_001 = "001_149361ff5abf473b.txt"   # HF docs zh: perf_train_special (PyTorch on Apple silicon)
SEED_002 = "002_30922ac40e33578f.txt"   # HF guide zh: perf_train_gpu_one (v4.37.2)
SEED_003 = "003_7cd14bfa87c3ab04.txt"   # memory-optimization table, chinese-macbert-large
SEED_004 = "004_b8ff7e651c792e6c.txt"   # "GPU acceleration comes to PyTorch on M1 Macs" (zh)
SEED_FILES = (SEED_000, SEED_001, SEED_002, SEED_003, SEED_004)
SEED_NAME = re.compile(r"^\d{3}_[0-9a-f]{16}\.txt$")


@dataclasses.dataclass(frozen=True)
class Document:
    file: str          # the seed file (internal: where a claim's words are looked up)
    short: str         # the name a sentence uses: 'HF guide "Efficient training on a single GPU"'
    title: str         # the full English title
    original: str      # the document's own title, as it stands in the file
    original_en: str   # its English
    origin: str = ""   # where the document says it comes from, when it says

    def cited(self) -> str:
        """The full title with the original one beside it, glossed."""
        return f"{self.title}; original title {glossed(self.original, self.original_en)}"


DOCUMENTS = MappingProxyType({d.file: d for d in (
    Document(SEED_000, 'blog post "Transformers optimization (MacBook M3)"',
             'Blog post "Transformers optimization (MacBook M3)" (advice written by ChatGPT-4)',
             "transformers优化(macbook M3)", "Transformers optimization (MacBook M3)"),
    Document(SEED_001, 'HF guide "PyTorch training on Apple silicon"',
             'Hugging Face guide "PyTorch training on Apple silicon" (Chinese translation of perf_train_special)',
             "在 Apple Silicon 芯片上进行 PyTorch 训练", "PyTorch training on Apple silicon chips",
             "transformers/docs/source/zh/perf_train_special.md"),
    Document(SEED_002, 'HF guide "Efficient training on a single GPU"',
             'Hugging Face guide "Efficient training on a single GPU" (Chinese translation of perf_train_gpu_one, '
             'v4.37.2)',
             "在单个GPU上进行高效训练的方法和工具", "methods and tools for efficient training on a single GPU",
             "https://huggingface.co/docs/transformers/v4.37.2/en/perf_train_gpu_one"),
    Document(SEED_003, 'tutorial "Simple GPU-memory optimization for Transformers"',
             'Tutorial "Simple GPU-memory optimization for Transformers: BERT-Large in 4 GB" (a blog post with a '
             'measured table for chinese-macbert-large)',
             "(原创)Transformers显存优化简易策略(本教程目标：4G显存也能跑BERT-Large)",
             "original work: simple GPU-memory optimization strategies for Transformers; this tutorial's goal: "
             "BERT-Large runs even on 4 GB of GPU memory"),
    Document(SEED_004, 'article "GPU acceleration comes to PyTorch on M1 Macs"',
             'Article "GPU acceleration comes to PyTorch on M1 Macs" (Chinese translation of a Towards Data Science '
             'post)',
             "GPU 加速来到 M1 MAC 电脑上的 PyTorch", "GPU acceleration comes to PyTorch on M1 Mac computers",
             "https://towardsdatascience.com/gpu-acceleration-comes-to-pytorch-on-m1-macs-195c399efcc1"),
)})
assert tuple(DOCUMENTS) == SEED_FILES


def document(file: str) -> Document:
    """The document stored as ``file`` (a seed file name)."""
    return DOCUMENTS[file]


def title(file: str) -> str:
    """The full English title of the document stored as ``file``: what users read, never the file name."""
    return DOCUMENTS[file].title


def short(file: str) -> str:
    """The name a sentence gives the document stored as ``file``."""
    return DOCUMENTS[file].short


# --------------------------------------------------------------------------- quotes and their English

# CJK text: ideographs (with extension A and compatibility forms), kana, bopomofo, radicals,
# CJK punctuation and the fullwidth forms (（），：) the documents punctuate with.
CJK = re.compile(r"[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31bf\u3400-\u4dbf\u4e00-\u9fff"
                 r"\uf900-\ufaff\uff00-\uffef]+")
# A quote and its English beside it: "<original>" (<English>), one level of parentheses
# allowed inside the English.
GLOSSED = re.compile(r'"([^"]+)" \(((?:[^()]|\([^()]*\))+)\)')
# A seed file's name anywhere in a string.
FILE_NAME = re.compile(r"\d{3}_[0-9a-f]{16}\.txt")
# This code's word for a document ("seed 003", "the seed's"), out of place in what users read.
JARGON = re.compile(r"\bseeds?\b", re.IGNORECASE)


def glossed(original: str, english: str) -> str:
    """A quote in the original language with its English beside it: ``"梯度累积" (gradient accumulation)``."""
    if CJK.search(english) or not re.search(r"[A-Za-z]", english):
        raise ValueError(f"the English of {original!r} must be English: {english!r}")
    if '"' not in original:
        return f'"{original}" ({english})'
    if CJK.search(original):
        raise ValueError(f"a quote in Chinese cannot hold a double quote: {original!r}")
    return f"'{original}' ({english})"


def unglossed(text: str) -> list[str]:
    """CJK text in ``text`` that has no English beside it (outside a ``glossed`` pair)."""
    def drop(m: re.Match) -> str:
        english = m.group(2)
        return "" if not CJK.search(english) and re.search(r"[A-Za-z]", english) else m.group(0)
    return CJK.findall(GLOSSED.sub(drop, text))


def file_names(text: str) -> list[str]:
    """Seed file names in ``text``."""
    return FILE_NAME.findall(text)


def jargon(text: str) -> list[str]:
    """The word "seed" in ``text``: a document must be named by its title."""
    return JARGON.findall(text)


def problems(text: str) -> list[str]:
    """What keeps ``text`` from being shown to users as it is: a seed file name, the word
    "seed", CJK text without its English beside it. Empty when it is fine."""
    return ([f"file name {n}" for n in file_names(text)] + [f"jargon {w!r}" for w in jargon(text)]
            + [f"no English beside {c!r}" for c in unglossed(text)])
