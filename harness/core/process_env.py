"""Process environment decided before torch or transformers are imported.

Two variables matter and both are read once, at import time:

* ``PYTORCH_ENABLE_MPS_FALLBACK`` is read when torch's MPS library registers its
  fallback kernel, so it must be set before ``import torch`` (or in a child process).
* ``HF_HUB_OFFLINE`` is read by huggingface_hub when it is imported. The suite forces it
  to ``1`` so that any hidden download fails loudly instead of reaching for a hub.

This module imports nothing heavy. ``ORIGINAL`` keeps the user's own values, taken
before the suite changed anything, so the environment checks judge *their* setup.
"""
from __future__ import annotations

import os
import sys

WATCHED = (
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "PYTORCH_MPS_LOW_WATERMARK_RATIO",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)

# Taken at first import of this module, which the pytest plugin does before anything else.
ORIGINAL: dict[str, str | None] = {name: os.environ.get(name) for name in WATCHED}

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
FALLBACK_CHOICES = ("on", "off")


def force_offline() -> None:
    """No hub at run time: a download attempt must fail, not succeed quietly."""
    for name in OFFLINE_VARS:
        os.environ[name] = "1"


def decide_mps_fallback(option: str | None) -> dict:
    """Set PYTORCH_ENABLE_MPS_FALLBACK for this process and its children.

    ``option`` is the ``--mps-fallback`` value: ``on``, ``off`` or None (not given).
    Not given: the suite's default is on, so a missing kernel is observed as a CPU
    fallback rather than ending a check. Returns what was decided, for the run header.
    """
    if option not in (None, *FALLBACK_CHOICES):
        raise ValueError(f"--mps-fallback must be one of {', '.join(FALLBACK_CHOICES)}, not {option!r}")
    chosen = option or "on"
    value = "1" if chosen == "on" else "0"
    torch_already_loaded = "torch" in sys.modules
    previous = os.environ.get(FALLBACK_VAR)
    os.environ[FALLBACK_VAR] = value
    decision = {
        "setting": chosen,
        "source": "--mps-fallback" if option else "suite default",
        "env_value": value,
        "user_value": ORIGINAL.get(FALLBACK_VAR),
        "effective": True,
    }
    if torch_already_loaded and previous != value:
        # torch read the variable when it loaded; changing it now does nothing in this
        # process. Say so rather than record a setting that is not in force.
        decision["effective"] = False
        decision["note"] = (
            "torch was imported before the suite could set PYTORCH_ENABLE_MPS_FALLBACK "
            f"(a plugin imported it); in force: {previous!r}"
        )
    return decision
