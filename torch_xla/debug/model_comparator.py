"""torch_xla.debug.model_comparator: save tensors at named points of two runs and diff them."""
import os

import torch

_save_dir = None


def configure(save_dir):
    """Where save() writes (None turns saving off)."""
    global _save_dir
    _save_dir = save_dir
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)


def save(name, tensor, step=None):
    """Store `tensor` (moved to the CPU) as <save_dir>/<name>[.<step>].pt."""
    if not _save_dir:
        return
    fname = f"{name}.{step}.pt" if step is not None else f"{name}.pt"
    torch.save(tensor.detach().cpu() if isinstance(tensor, torch.Tensor) else tensor,
               os.path.join(_save_dir, fname))


def compare_tensors(tensor1, tensor2, rtol=1e-05, atol=1e-08, max_diffs=25):
    """A list of text lines, one per differing element (at most max_diffs); [] when close."""
    if tensor1.shape != tensor2.shape:
        return [f"Shape mismatch: {tuple(tensor1.shape)} vs {tuple(tensor2.shape)}"]
    a, b = tensor1.detach().cpu().double(), tensor2.detach().cpu().double()
    bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return [f"{tuple(idx.tolist())}: {a[tuple(idx)].item()} vs {b[tuple(idx)].item()}"
            for idx in bad.nonzero()[:max_diffs]]


def tensor_file_compare(path1, path2, rtol=1e-05, atol=1e-08, max_diffs=25):
    return compare_tensors(torch.load(path1), torch.load(path2), rtol=rtol, atol=atol, max_diffs=max_diffs)


def compare(save_dir1, save_dir2, rtol=1e-05, atol=1e-08, max_diffs=25):
    """{file name: diff lines} for every .pt file present in both folders that differs."""
    report = {}
    for fname in sorted(set(os.listdir(save_dir1)) & set(os.listdir(save_dir2))):
        if fname.endswith(".pt"):
            diffs = tensor_file_compare(os.path.join(save_dir1, fname), os.path.join(save_dir2, fname),
                                        rtol=rtol, atol=atol, max_diffs=max_diffs)
            if diffs:
                report[fname] = diffs
    return report
