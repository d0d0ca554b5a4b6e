"""The property checks' cases: each op in each floating dtype, with the targets that run it,
the half-precision dtypes the CPU target checks per op (CPU_HALF_PRECISION), with why, and
the hypothesis settings every property test needs whatever profile is loaded
(PROPERTY_SETTINGS; the profiles themselves: harness.parity.properties.profiles).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from hypothesis import HealthCheck, settings

from harness.env.devices import TARGETS

FLOAT_DTYPES = ("float32", "float16", "bfloat16")

# The settings every property test needs whatever profile is loaded: the journal's record
# fixture is function-scoped on purpose (one record accumulates every example of a check),
# and the first call of a kernel may be slow (compilation, warm-up), which is no property
# of its numbers. A settings object takes what it does not name (max_examples ...) from the
# profile loaded when it is made: this module is imported by the suite, at collection, after
# hypothesis's plugin has loaded the session's profile; imported before (by the plugin, say)
# it would freeze hypothesis's defaults into every property test.
PROPERTY_SETTINGS = settings(
    deadline=None,
    suppress_health_check=(*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture))


# --------------------------------------------------------------------------- checks and their dtypes

@dataclasses.dataclass(frozen=True)
class DtypeCase:
    """A property in one dtype, with the targets that run it (see the ``cases`` marker)."""
    subject: str
    dtype: str
    targets: tuple[str, ...]

    @property
    def variant(self) -> str:  # parity/softmax/float32/property, beside the op sweep's .../float32/forward
        return f"{self.dtype}/property"

    @property
    def id(self) -> str:
        return self.dtype


class CpuHalves(NamedTuple):
    """The half-precision dtypes the CPU target checks for an op, and why not both."""
    dtypes: tuple[str, ...]
    reason: str


# float16 and bfloat16 run on the CPU too (judged against float64) where the CPU's own
# kernel stays inside the tolerance table; the ops below are the exceptions.
CPU_HALF_PRECISION = {
    "cross_entropy": CpuHalves(
        ("bfloat16",),
        "the CPU float16 kernel sums the label-smoothing term (every class's log-probability) in float16: "
        "for logits (3, 2048) at scale 4 (seed 0) it gives inf where float64 says 14.3; bfloat16's range holds it"),
    "embedding": CpuHalves(
        (),
        "the CPU float16 / bfloat16 kernel sums the table's gradient in that dtype (index_add): a token seen 1000 "
        "times with gradient 0.1 gets 105.2 in float16 and 32.0 in bfloat16 (about 100 in float64), which fails "
        "any honest tolerance against float64"),
}


def dtype_cases(subject: str) -> list[DtypeCase]:
    """float32 on every target; float16 and bfloat16 on accelerators, and on the CPU unless
    CPU_HALF_PRECISION leaves them out for ``subject`` (there they are judged against float64)."""
    from harness.env.devices import STAND_INS  # a registered stand-in is an accelerator here
    halves = CPU_HALF_PRECISION.get(subject)
    cpu = FLOAT_DTYPES if halves is None else ("float32", *halves.dtypes)
    return [DtypeCase(subject, dtype, tuple(t for t in TARGETS + tuple(STAND_INS)
                                            if dtype == "float32" or t != "cpu" or dtype in cpu))
            for dtype in FLOAT_DTYPES]
