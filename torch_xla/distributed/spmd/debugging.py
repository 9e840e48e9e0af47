"""torch_xla.distributed.spmd.debugging: draw which device holds which piece
of a sharded tensor.

`visualize_sharding(spec_string)` draws a table of the first two tiled
dimensions of a sharding spec string (`_get_xla_sharding_spec`), one cell per
tile, each naming the devices that hold it; `visualize_tensor_sharding(t)`
does it for a tensor. With `rich` installed the table is a rich Table (printed,
and returned); without it, plain text (printed, and returned as a string).
"""
import re

import numpy as np

import torch_xla
import torch_xla.runtime as xr

try:
    import rich.align
    import rich.box
    import rich.console
    import rich.padding
    import rich.style
    import rich.table
    RICH_ENABLED = True
except ImportError:  # pragma: no cover - rich is optional
    RICH_ENABLED = False

_SPEC = re.compile(r"^\{devices=\[([0-9,]+)\]([0-9,]+)( last_tile_dim_replicate)?\}$")


def _cells(sharding):
    """(rows, cols, {(row, col): device ordinal or list of ordinals}) of a spec string."""
    if sharding in ("", "{replicated}"):
        return 1, 1, {(0, 0): list(range(xr.global_runtime_device_count()))}
    m = _SPEC.match(sharding.strip())
    if m is None:
        raise ValueError(f"visualize_sharding: cannot read the sharding {sharding!r}: expected "
                         "'{replicated}' or '{devices=[...]<ids>[ last_tile_dim_replicate]}'")
    dims = [int(d) for d in m.group(1).split(",")]
    ids = [int(i) for i in m.group(2).split(",")]
    if int(np.prod(dims)) != len(ids):
        raise ValueError(f"visualize_sharding: {sharding!r} lists {len(ids)} devices for tiles {dims}")
    replicated = bool(m.group(3))
    arr = np.array(ids).reshape(dims if replicated else dims + [1])
    tiles = arr.shape[:-1]
    if len(tiles) == 1:
        arr, tiles = arr[None], (1,) + tuple(tiles)
    rows, cols = tiles[0], tiles[1]
    cells = {}
    for i in range(rows):
        for j in range(cols):
            held = [int(d) for d in arr[i, j].ravel()]
            # a tile on one device is shown by its ordinal, a replicated tile by the list
            cells[i, j] = held if replicated or len(held) > 1 else held[0]
    return rows, cols, cells


def visualize_sharding(sharding, use_color=True, scale=1., min_width=9, max_width=80):
    """Draw the first two tiled dimensions of `sharding` (a spec string such as
    '{devices=[2,2]0,1,2,3}'): one cell per tile naming the device(s) holding it.
    Prints the table and returns it (a rich Table, or a string without rich)."""
    rows, cols, cells = _cells(sharding)
    kind = xr.device_type()
    print(f"Visualizing {sharding} (showing up to the first two dimensions)")
    if not RICH_ENABLED:
        return _plain(rows, cols, cells, kind, max_width)
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0, highlight=not use_color,
                             pad_edge=False, box=None if use_color else rich.box.SQUARE)
    for i in range(rows):
        table.add_row(*[rich.padding.Padding(rich.align.Align(f"{kind} {cells[i, j]}", "center", vertical="middle"),
                                             (1, 1, 1, 1), style=rich.style.Style(bgcolor=None, color=None))
                        for j in range(cols)])
    console.print(table, end="\n\n")
    return table


def _plain(rows, cols, cells, kind, max_width):
    texts = [[f"{kind} {cells[i, j]}" for j in range(cols)] for i in range(rows)]
    w = min(max(len(x) for r in texts for x in r) + 2, max(max_width // max(cols, 1) - 1, 3))
    rule = "+" + "+".join("-" * w for _ in range(cols)) + "+"
    lines = [rule]
    for r in texts:
        lines.append("|" + "|".join(x[:w].center(w) for x in r) + "|")
        lines.append(rule)
    out = "\n".join(lines)
    print(out)
    return out


def construct_v1_sharding_str(t):
    """t's sharding as an HLO V1 spec string (the only form this torch_xla prints)."""
    return torch_xla._XLAC._get_xla_sharding_spec(t)


def visualize_tensor_sharding(t, **kwargs):
    """Draw how tensor t (or an XLAShardedTensor) is laid out over the devices."""
    from .xla_sharded_tensor import XLAShardedTensor
    if isinstance(t, XLAShardedTensor):
        t = t.global_tensor
    return visualize_sharding(construct_v1_sharding_str(t), **kwargs)
