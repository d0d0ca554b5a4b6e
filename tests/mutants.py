"""Wrong kernels, for self-tests only: the parity suite must catch them.

``run_case_with_wrong_softmax`` is ``harness.parity.ops.check.run_case`` with aten's float32
softmax kernel off by 1e-3 (every op that reaches ``aten._softmax`` in float32 sees it;
float16, bfloat16 and float64, the reference, are left alone). It runs in the sandbox
child, where tests/mutate.py sends the parity suite's calls.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.parity.ops import check

OFFSET = 1e-3


class WrongSoftmax(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._softmax.default and out.dtype == torch.float32:
            out = out + OFFSET
        return out


def run_case_with_wrong_softmax(op_key, device, dtype, pass_):
    with WrongSoftmax():
        return check.run_case(op_key, device, dtype, pass_)
