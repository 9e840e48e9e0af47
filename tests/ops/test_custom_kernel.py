"""Portable helpers of torch_xla.experimental.custom_kernel."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.experimental.custom_kernel import repeat_with_fixed_output_size


@pytest.mark.parametrize("total,reps", [
    (20, [0, 1, 2, 0, 4, 0, 6, 7, 8, 9]),      # cut short
    (100, [0, 5, 2, 0, 4, 9, 6, 7, 8, 0]),     # padded with the last element
    (135, [3, 6, 2, 14, 27, 47, 8, 28]),       # exact
])
def test_repeat_with_fixed_output_size_matches_repeat_interleave(total, reps):
    x = torch.randn(len(reps))
    r = torch.tensor(reps)
    base = torch.repeat_interleave(x, r)[:total]
    want = torch.cat((base, x[-1].repeat(total - base.shape[0])))
    dev = torch_xla.device()
    met.clear_all()
    got = repeat_with_fixed_output_size(x.to(dev), r.to(dev), total)
    assert "aten::" not in met.short_metrics_report()   # one graph, nothing on the CPU
    assert torch.equal(got.cpu(), want)
