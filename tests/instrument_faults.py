"""Faults in the harness's own instruments, for the self-tests of the controls that watch them
(harness/parity/controls.py): ``-p tests.instrument_faults`` (as a plugin it names itself in
``MPS_COMPAT_SANDBOX_PRELOAD``, so the sandbox children import it too, where the controls run),
or ``applied(...)`` around a call in a self-test's own process.

``MPS_COMPAT_INSTRUMENT_FAULTS`` is a comma-separated list of:

  tolerance   every tolerance of the parity judge (harness.parity.numerics.tolerances.tolerance)
              widened a million-fold: a judge that passes a result off by 1e-3
  reference   the parity suite's float64 reference (harness.parity.ops.samples.wide_reference)
              computed in the case's own dtype: a reference rounded like the result

Neither module imports torch, so patching them on import is safe in a pytest process that has
not decided the MPS fallback yet.
"""
import contextlib
import dataclasses
import os

from harness.core import isolate

VAR = "MPS_COMPAT_INSTRUMENT_FAULTS"
KINDS = ("tolerance", "reference")
WIDER = 1e6


def faults(value: str | None = None) -> tuple[str, ...]:
    named = tuple(filter(None, (value if value is not None else os.environ.get(VAR, "")).split(",")))
    unknown = [k for k in named if k not in KINDS]
    if unknown:
        raise ValueError(f"{VAR}: unknown fault {', '.join(map(repr, unknown))}; known: {', '.join(KINDS)}")
    return named


def _widened(real):
    def tolerance(op_name: str, dtype: str):
        tol = real(op_name, dtype)
        return dataclasses.replace(tol, rtol=tol.rtol * WIDER, atol=tol.atol * WIDER,
                                   source=f"{tol.source} (widened {WIDER:g}x by tests.instrument_faults)")
    return tolerance


def _in_dtype(real):
    def wide_reference(op, sample, dt, wide, pass_, trial=None, like=None):
        return real(op, sample, dt, dt, pass_, trial, like)   # "float64" is the case's dtype here
    return wide_reference


def _patches(kinds) -> list[tuple[object, str, object]]:
    """(module, attribute, replacement) for each fault: the reference is patched where the
    parity suite calls it by name too (harness.parity.ops.check imports it)."""
    from harness.parity.numerics import tolerances
    from harness.parity.ops import check, samples
    out = []
    if "tolerance" in kinds:
        out.append((tolerances, "tolerance", _widened(tolerances.tolerance)))
    if "reference" in kinds:
        wrong = _in_dtype(samples.wide_reference)
        out += [(samples, "wide_reference", wrong), (check, "wide_reference", wrong)]
    return out


@contextlib.contextmanager
def applied(*kinds: str):
    """The faults ``kinds`` in force in this process for the block, then undone."""
    faults(",".join(kinds))
    patches = _patches(kinds)
    kept = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in kept:
            setattr(module, name, value)


FAULTS = faults()
for _module, _name, _value in _patches(FAULTS):
    setattr(_module, _name, _value)


def pytest_configure(config):
    """Loaded as a plugin (-p), reach the sandbox children: they import what PRELOAD_VAR names
    when they start. (A plain import, a self-test's, leaves the environment alone.)"""
    preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
    if __name__ not in preload:
        os.environ[isolate.PRELOAD_VAR] = ",".join([*preload, __name__])
