"""torch_xla.experimental.custom_kernel: helpers upstream keeps beside its Pallas kernels.

Only the portable helper is here: `repeat_with_fixed_output_size`. The Pallas
(TPU) kernels themselves (flash/paged attention, grouped matmul) are not
provided by this torch_xla.
"""
import torch

__all__ = ["repeat_with_fixed_output_size"]


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor, total_repeat_length: int):
    """`torch.repeat_interleave(input, repeats)` with a static output length:
    cut to `total_repeat_length`, or padded with the last element of `input`
    when the repeats add up to less. A static shape keeps the step one graph
    (no data-dependent size, no host read)."""
    ends = torch.cumsum(repeats, dim=0)
    positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
    # element i covers [ends[i-1], ends[i]); past the end, the last element
    index = torch.searchsorted(ends, positions, right=True).clamp(max=input.shape[0] - 1)
    return input[index]
