"""torch_xla.runtime (xr): the PJRT runtime's view of this process and job."""
import os

from .engine import api as _api


def device_type():
    """The PJRT device kind: 'CPU', 'CUDA' or 'TPU'. None when PJRT_DEVICE is
    unset and PJRT_SELECT_DEFAULT_DEVICE=0 turns off picking one (as upstream)."""
    config = _api.config
    if not config.is_set("PJRT_DEVICE") and not config.read("PJRT_SELECT_DEFAULT_DEVICE"):
        return None
    return _api.device_type()


def using_pjrt():
    """Always True: the runtime is PJRT."""
    return True


def world_size():
    """Number of participants (processes, one device each) in the job; 1 in SPMD
    mode, where one logical device spans every device (and every host)."""
    if _api.topology.spmd_enabled():
        return 1
    return _api.topology.world_size()


def global_ordinal():
    """This process's rank in the job."""
    return _api.topology.rank()


def local_ordinal():
    """This process's rank on its host."""
    return _api.topology.local_rank()


def local_process_count():
    """Processes of the job on this host."""
    return _api.topology.local_process_count()


def process_index():
    """Index of this process in the job (same as the global ordinal here)."""
    return _api.topology.rank()


def process_count():
    """Processes in the job (in SPMD mode: one per host)."""
    return _api.topology.world_size()


def host_index():
    """Index of this host."""
    return _api.topology.host_index()


def local_device_count():
    """Devices on this host (each process of the job uses one)."""
    return local_process_count() * addressable_device_count()


def addressable_device_count():
    """Devices this process addresses: every local device for a process alone on
    its host outside SPMD (CPU_NUM_DEVICES on CPU), else one (in SPMD mode the
    logical device)."""
    return _api.addressable_device_count()


def global_device_count():
    """Devices in the whole job. In SPMD mode the one logical device (upstream's
    `SPMD:0`); global_runtime_device_count() counts the devices behind it."""
    if _api.topology.spmd_enabled():
        return 1
    return world_size()


def global_runtime_device_count():
    """Runtime devices in the whole job: every device of a single process
    (CPU_NUM_DEVICES host devices on CPU, SPMD or not), one per process otherwise."""
    if world_size() == 1:
        return _api.topology.spmd_device_count()
    return world_size()


def addressable_runtime_device_count():
    """Runtime devices this process drives."""
    return _api.topology.addressable_spmd_device_count() if world_size() == 1 else 1


def get_master_ip():
    """The coordinator's address."""
    return _api.config.read("MASTER_ADDR")


def is_spmd():
    """Whether XLA_USE_SPMD is set, as upstream reads it (use_spmd() sets it).
    Deleting it turns the answer off, not the mode: tensors made in SPMD mode stay
    on the SPMD device, as upstream's do."""
    return _api.config.read("XLA_USE_SPMD")


def use_spmd(auto=False):
    """Switch to SPMD: `xla:0` becomes one logical device over every local device
    (CPU_NUM_DEVICES host devices on CPU). Call it before any tensor is on the
    device (RuntimeError otherwise). `auto=True` (XLA's auto-sharding) is not
    supported and raises NotImplementedError."""
    if auto:
        raise NotImplementedError("torch_xla.runtime.use_spmd(auto=True): auto-sharding is not supported")
    topo = _api.topology
    if topo.world_size() > 1 and topo.local_process_count() > 1:
        raise RuntimeError("use_spmd() drives every device of a host from one process; this process is one of "
                           f"{topo.local_process_count()} on its host (run one process per host, e.g. "
                           "torch_xla.launch(fn, nprocs=1) with XLA_NUM_HOSTS)")
    _api.use_spmd()
    os.environ["XLA_USE_SPMD"] = "1"


def initialize_cache(path, readonly=False):
    """Turn on the persistent compilation cache at `path` (before any computation)."""
    _api.initialize_cache(path, readonly)


def set_device_type(pjrt_device):
    """Select the PJRT device kind before the runtime starts. Naming another
    kind once the runtime is up raises RuntimeError (the same kind is fine)."""
    from . import _XLAC
    if _XLAC._xla_runtime_is_initialized() and _api.config.raw("PJRT_DEVICE") != pjrt_device:
        raise RuntimeError("Can't change device type after XLA runtime is initialized")
    os.environ["PJRT_DEVICE"] = pjrt_device


def is_bf16_supported():
    """True when a bfloat16 tensor can be made on the XLA device."""
    import torch
    try:
        torch.tensor([1.0], dtype=torch.bfloat16, device="xla")
        return True
    except Exception:  # noqa: BLE001  (any failure means unsupported, as upstream)
        return False


def get_num_cached_compilation_graph():
    """How many compiled graphs the in-memory compilation cache holds."""
    return _api.compiled_graph_count()


def _device_attributes(jdev):
    attrs = {"name": f"{str(jdev.platform).upper()}:{jdev.id}", "device_kind": str(jdev.device_kind),
             "id": int(jdev.id), "process_index": int(jdev.process_index)}
    for key in ("coords", "core_on_chip", "num_cores", "slice_index"):
        val = getattr(jdev, key, None)
        if val is not None:
            attrs[key] = list(val) if isinstance(val, (tuple, list)) else val
    return attrs


def runtime_device_attributes(device):
    """Attributes of one runtime device of this process ('CPU:0' or 'xla:0'): name,
    device_kind, id, process_index, and on TPU coords/core_on_chip."""
    name = str(device)
    if name.startswith("xla"):
        import torch
        import torch_xla
        torch_xla.device(torch.device(name).index)  # raises for a device this process does not own
    elif name.split(":")[0].upper() not in (device_type(), "GPU" if device_type() == "CUDA" else ""):
        raise RuntimeError(f"runtime_device_attributes: unknown device {device}")
    return _device_attributes(_api.jax_device())


def global_runtime_device_attributes():
    """runtime_device_attributes of every device of the job (this process's from JAX,
    the others' as JAX's distributed client reports them)."""
    import jax
    mine = _api.jax_device()
    if world_size() == 1:
        return [_device_attributes(mine)]
    return [_device_attributes(d) for d in jax.devices()]
