"""The op sweep names a float16 / bfloat16 kernel that is wrong where float32 is right as the
half kernel's own (causes.HALF_KERNEL), not as reduced precision with the switch "compute it
in float32": the same bound the attention, property and model checks apply
(causes.half_precision_explains). A device that only keeps its running sums in the half
dtype (tests/standins.py, standin-half-sums) stays reduced precision.
"""
import pytest
import torch
from torch.utils import _pytree

from harness.env import devices
from harness.parity.numerics import causes
from harness.parity.ops import check
from tests import standins

_A = torch.ops.aten


class HalfSoftmaxShifted(standins.CountingMode):
    """softmax in float16 / bfloat16 returns each row's probabilities shifted by one place
    along the dimension (a half-only kernel that indexes its output wrongly); float32 is the
    CPU's."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _A._softmax.default and args[0].dtype in (torch.float16, torch.bfloat16) and args[0].dim():
            dim = args[1] % args[0].dim()
            if out.size(dim) > 1:
                self.changed += 1
                return out.roll(1, dim)
        return out


class HalfSoftmaxStandIn(standins.ModeStandIn):
    name = "standin-half-softmax-shifted"
    summary = "softmax in float16 / bfloat16 shifted by one place along its dimension"
    Mode = HalfSoftmaxShifted


@pytest.fixture
def shifted(monkeypatch):
    stand_in = HalfSoftmaxStandIn()
    monkeypatch.setitem(devices.STAND_INS, stand_in.name, stand_in)
    return stand_in.name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_only_softmax_bug_is_the_half_kernel_not_reduced_precision(shifted, dtype):
    found = check.judge(check.run_case("softmax", shifted, dtype, "forward"))
    assert found.status == "fail" and found.metrics["cause"] == causes.HALF_KERNEL, found.message
    assert "compute it in float32" not in found.metrics["switch"] and "report it" in found.metrics["switch"]
    assert check.judge(check.run_case("softmax", shifted, "float32", "forward")).status == "pass"


def test_sums_kept_in_the_half_dtype_stay_reduced_precision():
    """index_fill's gradient sums in float16 on standin-half-sums (margin about 7): the miss is
    within half precision's reach of the CPU's own, so its cause is still reduced precision."""
    found = check.judge(check.run_case("index_fill", "standin-half-sums", "float16", "backward"))
    assert found.status == "fail" and found.metrics["cause"] == "reduced-precision", found.message


def test_output_triples_pair_each_floating_tensor_and_skip_the_rest():
    t = (torch.ones(2, dtype=torch.float16), torch.tensor([1, 2]), {"g": torch.zeros(3)})
    triples = check.output_triples(t, t, _pytree.tree_map(lambda x: x.double() if x.is_floating_point() else x, t))
    assert [tuple(x.shape for x in triple) for triple in triples] == [((2,),) * 3, ((3,),) * 3]
    assert check.output_triples((torch.ones(1),), (torch.ones(1), torch.ones(1)), (torch.ones(1),)) == []
