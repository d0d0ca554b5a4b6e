"""Faults injected into torch.compile, for the self-tests of the compiled-against-eager family
(harness/parity/compiled.py): ``-p tests.compile_faults`` (as a plugin it names itself in
``MPS_COMPAT_SANDBOX_PRELOAD``, so the sandbox children import it too), or
``MPS_COMPAT_SANDBOX_PRELOAD=tests.compile_faults`` for the children alone.

``MPS_COMPAT_COMPILE_FAULTS`` is a comma-separated list of:

  off:<op>    every graph inductor compiles that calls <op> (a function or Tensor method of that
              name: gelu, softmax ...) computes <op>'s output times (1 + 2^-8), so the compiled
              result is off by 2^-8 relative and, the scaling being part of the graph, so is its
              gradient: a compiled kernel that differs from eager
  fail:<op>   inductor raises on every graph that calls <op>: a compile failure (dynamo reports
              it as BackendCompilerFailed, with this error joined)
  nan:<op>    every graph inductor compiles that calls <op> makes every NAN_EVERY-th element of
              <op>'s output (in its flat order) NaN: a compiled kernel that gives NaN where
              eager gives a number
  flaky:<op>  the compiled code of every graph that calls <op> gives its floating outputs times
              (1 + 2^-8) on its first call, third, fifth ...: a kernel whose result changes
              between runs, wrong on an unlucky one
  drift:<op>  as flaky, off by k x 2^-8 on its k-th call: other bits on every run, each as wrong

Both wrap ``torch._inductor.compile_fx.compile_fx``, what torch.compile's default backend calls,
so eager and the lighter backends (``backend="eager"``, ``"aot_eager"``: the reruns that name a
cause) stay right. The wrapper goes on when that module is imported, never by importing it here:
a pytest process that loads this plugin must not load torch before the suite's plugin has
decided the MPS fallback.
"""
import functools
import importlib.abc
import importlib.util
import operator
import os
import sys

from harness.core import isolate

VAR = "MPS_COMPAT_COMPILE_FAULTS"
FACTOR = 1 + 2 ** -8
NAN_EVERY = 7
MODULE = "torch._inductor.compile_fx"
KINDS = ("off", "fail", "nan", "flaky", "drift")
MARK = "mps_compat_compile_fault"    # on a graph already handled (compile_fx calls itself with config patches)
INJECTED = "injected compile failure"


def faults() -> list[tuple[str, str]]:
    out = []
    for item in filter(None, os.environ.get(VAR, "").split(",")):
        kind, _, op = item.partition(":")
        if kind not in KINDS or not op:
            raise ValueError(f"{VAR}: unknown fault {item!r}; known: " + ", ".join(f"{k}:<op>" for k in KINDS))
        out.append((kind, op))
    return out


FAULTS = faults()


def calls(gm, op: str) -> list:
    """The nodes of ``gm`` (dynamo's graph, before AOTAutograd) that call ``op``: a function
    of that name (torch.softmax, torch._C._nn.gelu ...) or a Tensor method (x.softmax(...))."""
    return [node for node in gm.graph.nodes
            if (node.op == "call_function" and getattr(node.target, "__name__", None) == op)
            or (node.op == "call_method" and node.target == op)]


def _scale(gm, nodes) -> None:
    graph = gm.graph
    for node in nodes:
        with graph.inserting_after(node):
            scaled = graph.call_function(operator.mul, (node, FACTOR))
        node.replace_all_uses_with(scaled, delete_user_cb=lambda user, scaled=scaled: user is not scaled)
    gm.recompile()


def poisoned(t):
    """``t`` with every NAN_EVERY-th element, in its flat order, NaN (traced into the graph)."""
    import torch
    where = (torch.arange(t.numel(), device=t.device) % NAN_EVERY == 0).reshape(t.shape)
    return torch.where(where, torch.full_like(t, float("nan")), t)


def _poison(gm, nodes) -> None:
    graph = gm.graph
    for node in nodes:
        with graph.inserting_after(node):
            bad = graph.call_function(poisoned, (node,))
        node.replace_all_uses_with(bad, delete_user_cb=lambda user, bad=bad: user is not bad)
    gm.recompile()


def unsteady(compiled_fn, kind: str):
    """``compiled_fn`` (what compile_fx returns, called with the graph's inputs at every run)
    whose floating outputs are scaled at run time as ``kind`` says (flaky, drift)."""
    import torch
    from torch.utils import _pytree
    runs = [0]

    def run(*args, **kwargs):
        out = compiled_fn(*args, **kwargs)
        runs[0] += 1
        factor = (FACTOR if runs[0] % 2 else 1.0) if kind == "flaky" else 1 + 2 ** -8 * runs[0]
        return _pytree.tree_map(lambda t: t * factor if isinstance(t, torch.Tensor) and t.is_floating_point()
                                else t, out)
    for name, value in vars(compiled_fn).items() if hasattr(compiled_fn, "__dict__") else ():
        setattr(run, name, value)   # _boxed_call and the like: how dynamo calls it
    return run


def wrap(module) -> None:
    """Put the faults around ``module.compile_fx`` (torch._inductor.compile_fx)."""
    real = module.compile_fx

    @functools.wraps(real)
    def compile_fx(gm, example_inputs, *args, **kwargs):
        meta = getattr(gm, "meta", None)
        at_run_time = []
        if isinstance(meta, dict) and not meta.get(MARK):
            meta[MARK] = True
            for kind, op in FAULTS:
                found = calls(gm, op)
                if found and kind == "fail":
                    raise RuntimeError(f"{INJECTED}: a graph that calls {op} ({VAR})")
                if found and kind == "off":
                    _scale(gm, found)
                if found and kind == "nan":
                    _poison(gm, found)
                if found and kind in ("flaky", "drift"):
                    at_run_time.append(kind)
        out = real(gm, example_inputs, *args, **kwargs)
        for kind in at_run_time:
            out = unsteady(out, kind)
        return out
    module.compile_fx = compile_fx


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds torch._inductor.compile_fx as Python would, and wraps it once it has run."""

    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)   # the real spec, found without us; one module, once
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                wrap(module)
            spec.loader.exec_module = exec_module
        return spec


if FAULTS:
    if MODULE in sys.modules:
        wrap(sys.modules[MODULE])
    elif not any(isinstance(f, _WrapOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())

def pytest_configure(config):
    """Loaded as a plugin (-p), reach the sandbox children: they import what PRELOAD_VAR names
    when they start. (A plain import, a self-test's, leaves the environment alone.)"""
    preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
    if __name__ not in preload:
        os.environ[isolate.PRELOAD_VAR] = ",".join([*preload, __name__])
