"""Which aten ops a model dispatches in one training step, and would they run natively on MPS.

    python -m tools.audit MODEL [--device cpu] [--format text|json] [--optimizer adamw]
                                [--attn sdpa|eager] [--kernels FILE]

MODEL is a built-in (bert, gpt2, t5, llama, minilm: harness/core/models.py) or
``module:factory``, a callable importable from the current directory (or sys.path)
called with no arguments. The factory returns one of:

* a model: it must be a transformers ``PreTrainedModel``, and a seeded batch is built
  from its config (``input_ids`` from the vocabulary, ``attention_mask``, ``labels``
  shaped for its head: ``harness.core.models.batch_for``);
* ``(model, batch)``: ``batch`` is a dict (``model(**batch)``), a tuple (``model(*batch)``)
  or a tensor (``model(batch)``); the loss is ``output.loss``, or the first floating
  tensor of the output summed;
* ``(model, batch, loss_fn)``: the loss is ``loss_fn(output, batch)``.

The step is forward (with the loss), ``loss.backward()`` and one optimizer step, each
recorded separately (harness/ops/audit.py, with the prediction). Op names are
``aten::name[.overload]``, as MPS fallback warnings name them. With ``--kernels FILE``, a JSON object with ``mps_ops`` (the
native_functions.yaml names with an MPS kernel) and optionally ``structured_delegates``
(name -> its out form) and ``composite_ops``, the ops are split into those with an MPS
kernel, composites and those without (``predict_native``: a static prediction; running on
a Mac is the ground truth).

Exit status: 0 audited; 1 the model failed during the step (the error is in the output
and on stderr); 2 bad input (unknown model or device, device absent, module or factory
not found or raising, bad kernels file), said in one line on stderr.

No hub: HF_HUB_OFFLINE=1 is set before transformers loads. transformers' own log chatter
and progress bars are off unless TRANSFORMERS_VERBOSITY / HF_HUB_DISABLE_PROGRESS_BARS say
otherwise.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

from harness.env import facts
from harness.env.devices import TARGETS
from tools import cli

BUILTINS = ("bert", "gpt2", "t5", "llama", "minilm")  # = harness.core.models.MODELS, without importing it
OPTIMIZERS = ("adamw", "adamw-loop", "adamw-foreach", "adamw-fused", "sgd")  # = harness.ops.audit.OPTIMIZERS
ATTN = ("sdpa", "eager")


class UsageError(Exception):
    """Bad input: the message is the one line printed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m tools.audit", description=cli.summary(__doc__))
    p.add_argument("model", help=f"built-in ({', '.join(BUILTINS)}) or module:factory")
    p.add_argument("--device", default="cpu", help=f"device to run on ({', '.join(TARGETS)}; default cpu)")
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                   help="adamw: torch's default kernel path; -loop / -foreach / -fused force one")
    p.add_argument("--attn", choices=ATTN, help="attention implementation of a built-in model (default sdpa)")
    p.add_argument("--kernels", metavar="FILE", help='JSON with "mps_ops" (and optionally "structured_delegates", '
                                                     '"composite_ops"): predict which ops run natively on MPS')
    return p


# --------------------------------------------------------------------------- input checks

def check_device(value: str) -> str:
    """The device string, if its target is known and present here; else UsageError."""
    kind = value.split(":", 1)[0].strip().lower()
    if kind not in TARGETS:
        raise UsageError(f"--device: unknown target {value!r}; choose from {', '.join(TARGETS)}")
    if kind != "cpu":
        from harness.env import devices
        avail = devices.backend(kind).availability()
        if not avail.available:
            raise UsageError(f"--device {value}: {avail.reason}")
    return value.strip().lower()


def read_kernels(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--kernels {path}: cannot read: {exc.strerror or exc}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--kernels {path}: not valid JSON ({type(exc).__name__})")
    if not isinstance(data, dict) or not isinstance(data.get("mps_ops"), list) \
            or not all(isinstance(x, str) for x in data["mps_ops"]):
        raise UsageError(f"--kernels {path}: expected an object with \"mps_ops\": a list of op names")
    delegates = data.get("structured_delegates") or {}
    composites = data.get("composite_ops") or []
    if not isinstance(delegates, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in delegates.items()):
        raise UsageError(f"--kernels {path}: \"structured_delegates\" must map op names to op names")
    if not isinstance(composites, list) or not all(isinstance(x, str) for x in composites):
        raise UsageError(f"--kernels {path}: \"composite_ops\" must be a list of op names")
    return {"mps_ops": data["mps_ops"], "structured_delegates": delegates, "composite_ops": composites}


def _exc_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_factory(spec: str):
    """``module:factory`` -> the callable (dotted attributes allowed: ``mod:Class.build``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{spec!r}: give module:factory (for example mymodels:make_model)")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(f"{spec}: no module named {module_name!r} (run from the directory that holds it, "
                             f"or put it on PYTHONPATH)")
        raise UsageError(f"{spec}: importing {module_name!r} failed: {_exc_line(exc)}")
    except Exception as exc:
        raise UsageError(f"{spec}: importing {module_name!r} failed: {_exc_line(exc)}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{spec}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{spec}: {attr!r} is a {type(obj).__name__}, not a callable factory")
    return obj


def from_factory(factory, spec: str):
    """Call the factory and read its result as (model, batch, loss_fn) by the protocol above."""
    import torch
    from harness.core import models
    try:
        made = factory()
    except Exception as exc:
        raise UsageError(f"{spec}: the factory raised {_exc_line(exc)}")
    if isinstance(made, models.Example):
        return made.model, made.batch, made.loss_fn
    if isinstance(made, torch.nn.Module):
        try:
            from transformers import PreTrainedModel
        except ImportError:  # pragma: no cover - transformers is a dependency
            PreTrainedModel = ()
        if not isinstance(made, PreTrainedModel):
            raise UsageError(f"{spec}: returned a {type(made).__name__} without a batch, and only a transformers "
                             f"PreTrainedModel gets one built from its config; return (model, batch)")
        try:
            return made, models.batch_for(made), None
        except Exception as exc:
            raise UsageError(f"{spec}: cannot build a batch for {type(made).__name__}: {_exc_line(exc)}; "
                             f"return (model, batch)")
    if isinstance(made, (tuple, list)) and len(made) in (2, 3) and isinstance(made[0], torch.nn.Module):
        loss_fn = made[2] if len(made) == 3 else None
        if loss_fn is not None and not callable(loss_fn):
            raise UsageError(f"{spec}: the third item must be a loss function (output, batch) -> loss, "
                             f"not a {type(loss_fn).__name__}")
        return made[0], made[1], loss_fn
    raise UsageError(f"{spec}: returned a {type(made).__name__}; expected a model, (model, batch) "
                     f"or (model, batch, loss_fn)")


# --------------------------------------------------------------------------- output

def render_text(target: str, result: dict, prediction: dict | None, kernels_file: str | None) -> str:
    from harness.ops.audit import PHASES
    opt = result["optimizer"]
    attn = f", attention {result['attn_implementation']}" if result.get("attn_implementation") else ""
    lines = [f"{target}: {result['model']}{attn} on {result['device']}; optimizer {opt['name']}"
             + (f" ({opt['path']} path)" if opt.get("path") else "")]
    if result["error"]:
        lines.append(f"error: {result['error']}")
    for phase in PHASES:
        calls = result["calls"][phase]
        secs = result["seconds"].get(phase)
        lines.append(f"\n{phase}: {len(calls)} ops, {sum(calls.values())} calls"
                     + (f", {secs:.2f} s" if secs is not None else ""))
        width = max((len(op) for op in calls), default=0)
        lines += [f"  {op:<{width}}  {n}" for op, n in calls.items()]
    fb = result["fallback_ops"]
    listed = ", ".join(f"{op} ({'/'.join(p for p in PHASES if op in result['fallback_by_phase'][p])})" for op in fb)
    on_cpu = result["device"].split(":")[0] == "cpu"
    lines.append("\nfell back to the CPU: " + (listed or ("n/a (ran on the CPU)" if on_cpu else "none")))
    if prediction is not None:
        lines.append(f"\nprediction for MPS (static, from {kernels_file}): {len(prediction['with_kernel'])} ops with an "
                     f"MPS kernel, {len(prediction['composite'])} composite, "
                     f"{len(prediction['without_kernel'])} without")
        if prediction["without_kernel"] and not prediction["composite"]:
            lines.append("  (no composite_ops given: composites that run natively are among these)")
        for op in prediction["without_kernel"]:
            note = prediction["notes"].get(op)
            lines.append(f"  no MPS kernel: {op}" + (f"  ({note})" if note else ""))
        for op, note in prediction["notes"].items():
            if op not in prediction["without_kernel"]:
                lines.append(f"  note: {op}: {note}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main

def run(argv: list[str] | None) -> int:
    facts.force_offline()  # before anything can import huggingface_hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    args = parser().parse_args(argv)
    device = check_device(args.device)
    kernels = read_kernels(args.kernels) if args.kernels else None
    is_builtin = args.model in BUILTINS
    if not is_builtin and ":" not in args.model:
        raise UsageError(f"unknown model {args.model!r}; give one of {', '.join(BUILTINS)} or module:factory")
    if args.attn and not is_builtin:
        raise UsageError("--attn applies to the built-in models; a factory chooses its own attention")
    factory = None if is_builtin else load_factory(args.model)
    from harness.core import models
    from harness.ops import audit
    if is_builtin:
        try:
            ex = models.example(args.model, args.attn or "sdpa")
        except Exception as exc:
            raise UsageError(f"{args.model}: cannot build the built-in model: {_exc_line(exc)}")
        model, batch, loss_fn = ex.model, ex.batch, ex.loss_fn
    else:
        model, batch, loss_fn = from_factory(factory, args.model)
    t0 = time.perf_counter()
    found = audit.audit_model(model, batch, device, optimizer=args.optimizer, loss_fn=loss_fn)
    found.seconds["total"] = round(time.perf_counter() - t0, 4)
    result = {**found.as_dict(), "target": args.model}
    prediction = None
    if kernels is not None:
        prediction = audit.predict_native(found.ops, kernels["mps_ops"], kernels["structured_delegates"],
                                          kernels["composite_ops"])
        result["prediction"] = prediction
    if args.format == "json":
        sys.stdout.write(json.dumps(result, indent=1, sort_keys=False) + "\n")
    else:
        sys.stdout.write(render_text(args.model, result, prediction, args.kernels))
    if result["error"]:
        print(f"audit: {args.model}: {result['error']}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except UsageError as exc:
        print(f"audit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
