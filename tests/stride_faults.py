"""A test-only pytest plugin (-p tests.stride_faults): argsort, digamma and lgamma made to
ignore the strides of a non-contiguous input, in every dtype, float64 included: the shape
of pytorch#175187 (sort / argsort / digamma / lgamma on MPS read non-contiguous inputs as
if they were contiguous).

The fault reads the values one element off along the last dim (the result of the
contiguous copy, rolled by one), as a kernel that drops a view's storage offset would.
Because float64 is wrong too, a reference made by the same kernel on the same view would
agree with it and the bug would cancel out; the property suite must catch it by its
reference on contiguous copies (harness.parity.properties.tally).
"""
import torch


def _ignores_strides(real):
    def wrong(x, *args, **kwargs):
        y = real(x.contiguous(), *args, **kwargs)
        if x.is_contiguous() or x.dim() == 0 or x.shape[-1] < 2:
            return y
        return y.roll(1, -1)
    return wrong


torch.argsort = _ignores_strides(torch.argsort)
torch.special.digamma = _ignores_strides(torch.special.digamma)
torch.lgamma = _ignores_strides(torch.lgamma)
