"""torch_xla.debug.graph_saver: dump the IR graph of tensors to a folder."""
import os

from ..engine import api as _api


def save_tensors_graph(save_dir, name, tensors):
    """Write the IR text of `tensors` to `<save_dir>/<name>.<ordinal>.txt`
    (format XLA_SAVE_GRAPH_FMT: text, dot or hlo)."""
    import torch_xla
    import torch_xla.runtime as xr
    fmt = _api.config.read("XLA_SAVE_GRAPH_FMT")   # another word raises ValueError
    dump = {"text": torch_xla._XLAC._get_xla_tensors_text, "dot": torch_xla._XLAC._get_xla_tensors_dot,
            "hlo": torch_xla._XLAC._get_xla_tensors_hlo}[fmt]
    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, f"{name}.{xr.global_ordinal()}.{fmt}")
    with open(path, "w") as f:
        f.write(dump(list(tensors)))
    return path
