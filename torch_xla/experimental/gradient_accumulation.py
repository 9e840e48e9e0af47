"""torch_xla.experimental.gradient_accumulation: accumulate gradients over the
leading dimension of a batch in one step graph.

Upstream lowers the loop to one XLA `While`; here the loop is unrolled into
the step's graph (same values, same gradients; the graph grows with the number
of accumulation steps and one graph is compiled per step count).
"""
import torch


def gradient_accumulation(train_step, iterable_tensors, model, *carried_tensors):
    """Run `train_step(*slices, *carried)` for each index of the leading dimension
    of `iterable_tensors`; each loss is divided by the number of steps and
    back-propagated, so the parameters' `.grad` gain the mean gradient.

    -> the accumulated (summed, scaled) loss, or (loss, *carried_tensors) when
    carried tensors are given; `train_step` returns `loss` or `(loss, *carried)`."""
    iterable_tensors = tuple(iterable_tensors)
    if not iterable_tensors:
        raise ValueError("gradient_accumulation needs at least one iterable tensor")
    steps = iterable_tensors[0].size(0)
    if any(t.size(0) != steps for t in iterable_tensors):
        raise ValueError("all iterable tensors must have the same leading dimension, got "
                         f"{[tuple(t.shape) for t in iterable_tensors]}")
    carried = tuple(carried_tensors)
    total = None
    for i in range(steps):
        result = train_step(*(t[i] for t in iterable_tensors), *carried)
        if carried:
            loss, *rest = result
            carried = tuple(rest)
        else:
            loss = result
        loss = loss / steps
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    if not carried:
        return total
    return (total, *carried)


__all__ = ["gradient_accumulation"]
