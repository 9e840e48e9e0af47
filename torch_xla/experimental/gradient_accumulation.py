"""Gradient accumulation over the leading dimension of a batch.

`gradient_accumulation(train_step, iterable_tensors, model, *carried_tensors)`
runs `train_step(*slices, *carried)` once per index of the tensors' first
dimension, back-propagates `loss / steps` each time (the model's `.grad`
attributes accumulate), and returns the summed (scaled) loss and the final carried tensors.

Here the loop is unrolled into the lazy graph (one XLA graph per call shape), not
an XLA While loop as upstream builds: same results, a graph that grows with the
number of steps."""
from typing import Any, Callable, Tuple

import torch


def gradient_accumulation(train_step: Callable[..., Any], iterable_tensors: Tuple[torch.Tensor, ...],
                          model: torch.nn.Module, *carried_tensors: torch.Tensor):
    """Returns the accumulated loss, or `(loss, *carried_tensors)` when there are
    carried tensors; the model's parameters hold the accumulated gradients."""
    if not iterable_tensors:
        raise ValueError("iterable_tensors cannot be empty")
    steps = iterable_tensors[0].size(0)
    for i, t in enumerate(iterable_tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Element {i} of iterable_tensors is not a tensor")
        if t.numel() == 0:
            raise ValueError(f"Element {i} of iterable_tensors is empty")
        if t.size(0) != steps:
            raise ValueError(f"Element {i} of iterable_tensors has inconsistent first dimension")

    carried = list(carried_tensors)
    total = None
    for step in range(steps):
        inputs = [t[step] for t in iterable_tensors]
        watched = list(iterable_tensors) + carried
        versions = [t._version for t in watched]
        result = train_step(*inputs, *carried)
        if any(t._version != v for t, v in zip(watched, versions)):
            raise AssertionError(
                "gradient_accumulation: train_step mutated one of its input tensors in place; "
                "it must be pure (return updated carried tensors instead)")
        if carried_tensors:
            loss, *new_carried = result
            if len(new_carried) != len(carried):
                raise ValueError(f"gradient_accumulation: train_step returned {len(new_carried)} "
                                 f"carried tensors, expected {len(carried)}")
            carried = new_carried
        else:
            loss = result
        loss = loss / steps
        if loss.requires_grad:
            loss.backward()
        loss = loss.detach()
        total = loss if total is None else total + loss
    if carried_tensors:
        return (total, *carried)
    return total
