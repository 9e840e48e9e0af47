"""Turning the per-rank state dicts of an XlaFullyShardedDataParallel model
back into the state dict of the unwrapped model.

Each rank saves `model.state_dict()` (its shards) and `model.get_shard_metadata()`.
A shard parameter's key has a component starting with `_fsdp_shard`; the part
before it names the FSDP module that owns it, and the metadata's
`shard_info[that module][that component]` gives the full tensor's name and size.
Flattened parameters (`flatten_parameters=True`) are then split by
`flatten_info`, and the wrapper prefixes (`_fsdp_wrapped_module.`) dropped.
The layout is upstream's, so checkpoints from either implementation consolidate.
"""
import collections
import glob
import math

import torch

__all__ = ["consolidate_sharded_state_dicts", "consolidate_sharded_model_checkpoints"]

_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_fpw_module.")


def _strip_wrappers(name):
    for p in _WRAPPER_PREFIXES:
        name = name.replace(p, "")
    return name


def _split_shard_key(key):
    """'a.b._fsdp_shard...' -> ('a.b', '_fsdp_shard...'), or None for an unsharded entry."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_fsdp_shard"):
            return ".".join(parts[:i]), ".".join(parts[i:])
    return None


def _join(prefix, name):
    return name if not prefix else prefix + "." + name


def _full_tensor(shards, orig_size):
    full = torch.cat([s.detach().cpu() for s in shards], dim=0)
    orig_size = tuple(orig_size)
    if full.dim() == 1:   # flattened and padded shards
        return full[:math.prod(orig_size)].view(orig_size)
    return full[:orig_size[0]]   # shard_param_on_dim_0: padded along dim 0 only


def consolidate_sharded_state_dicts(state_dict_list, shard_metadata):
    """Merge the FSDP state dicts of every rank, given in rank order, into the
    unwrapped model's state dict, using `get_shard_metadata()` of any rank.
    Buffers are taken from rank 0 (cast back to their original dtype)."""
    world = shard_metadata["world_size"]
    if len(state_dict_list) != world:
        raise ValueError(f"consolidate_sharded_state_dicts: the checkpoints were saved by {world} ranks, "
                         f"but {len(state_dict_list)} state dicts were given")
    shard_info = shard_metadata["shard_info"]
    buffer_info = shard_metadata.get("buffer_info", {})
    merged = collections.OrderedDict()
    for key, value in state_dict_list[0].items():
        split = _split_shard_key(key)
        if split is None:
            if key in buffer_info:
                value = value.to(buffer_info[key]["_orig_dtype"])
            merged[key] = value
            continue
        owner, shard_name = split
        try:
            info = shard_info[owner][shard_name]
        except KeyError:
            raise KeyError(f"consolidate_sharded_state_dicts: {key} is a shard but the shard metadata does "
                           "not describe it (metadata from another model?)") from None
        shards = []
        for rank, sd in enumerate(state_dict_list):
            if key not in sd:
                raise KeyError(f"consolidate_sharded_state_dicts: rank {rank}'s state dict has no {key}")
            shards.append(sd[key])
        merged[_join(owner, info["_orig_name"])] = _full_tensor(shards, info["_orig_size"])

    flatten_info = shard_metadata.get("flatten_info", {})
    out = collections.OrderedDict()
    for key, value in merged.items():
        meta = flatten_info.get(key) if "flat_param_" in key else None
        if meta is None:
            out[key] = value
            continue
        names, shapes, numels = meta
        prefix = key.rsplit(".", 1)[0] if "." in key else ""
        for n, shape, piece in zip(names, shapes, value.split(list(numels))):
            out[_join(prefix, n)] = piece.view(tuple(shape))
    return collections.OrderedDict((_strip_wrappers(k), v) for k, v in out.items())


def consolidate_sharded_model_checkpoints(ckpt_prefix, ckpt_suffix="*.pth", save_path="", save_model=True):
    """Load every file matching `ckpt_prefix + ckpt_suffix` (each a dict with the
    rank's `model` state dict and its `shard_metadata`), check that they are one
    complete set of ranks, and consolidate them. With `save_model`, write
    {"model": full_state_dict} to `save_path` (default
    `ckpt_prefix + "_consolidated.pth"`). Returns (full_state_dict, the path
    written or None)."""
    pattern = ckpt_prefix + ckpt_suffix
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise FileNotFoundError(f"consolidate_sharded_model_checkpoints: no file matches {pattern}")
    print(f"found {len(paths)} checkpoint files in {pattern}")
    ckpts = []
    for path in paths:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(ckpt, dict) or "model" not in ckpt or "shard_metadata" not in ckpt:
            raise ValueError(f"consolidate_sharded_model_checkpoints: {path} is not an FSDP checkpoint "
                             "(a dict with 'model' and 'shard_metadata')")
        ckpts.append((ckpt["shard_metadata"]["rank"], path, ckpt))
    ckpts.sort(key=lambda c: c[0])
    for i, (rank, path, ckpt) in enumerate(ckpts):
        world = ckpt["shard_metadata"]["world_size"]
        if world != len(ckpts):
            raise ValueError(f"consolidate_sharded_model_checkpoints: {path} was saved by a job of {world} ranks "
                             f"but {len(ckpts)} files match {pattern}; remove stale or foreign files")
        if rank != i:
            raise ValueError(f"consolidate_sharded_model_checkpoints: the files matching {pattern} do not hold "
                             f"ranks 0..{len(ckpts) - 1} exactly once ({path} is rank {rank}, expected {i})")
    full = consolidate_sharded_state_dicts([c[2]["model"] for c in ckpts], ckpts[0][2]["shard_metadata"])
    written = None
    if save_model:
        written = save_path or ckpt_prefix + "_consolidated.pth"
        torch.save({"model": full}, written)
        print(f"saved consolidated model to {written}")
    return full, written
