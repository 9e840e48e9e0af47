"""Moving a call's arguments to a device and its results back, for the tests that
run one function on CPU tensors and on XLA tensors."""
import torch


def to(a, dev):
    """a (a tensor, or lists and tuples of them; anything else as it is) on dev."""
    if isinstance(a, torch.Tensor):
        return a.to(dev)
    if isinstance(a, (list, tuple)):
        return type(a)(to(x, dev) for x in a)
    return a


def cpu(out):
    """out's tensors on the CPU, in the same lists and tuples."""
    if isinstance(out, torch.Tensor):
        return out.cpu()
    if isinstance(out, (list, tuple)):
        return type(out)(cpu(o) for o in out)
    return out
