"""The shape of the job this process belongs to: the one place that answers
how many processes, which one is this, single / multi-process / SPMD, the
job's mesh, and where an uploaded tensor is placed.

Values come from the environment the launchers set (xmp.spawn,
torch_xla.launch, torchrun): WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK (upstream's XLA_* spellings are accepted too: each is declared as
the fallback of the torchrun name in base/config.py). They are read at each
call, so a process that learns its place late (a forked replica) sees it.
"""
import glob

from ..base import config

SINGLE = "single"
MULTIPROCESS = "multiprocess"
SPMD = "spmd"
MESH_AXIS = "xla_replicas"   # the 1-D axis of a multi-process job's mesh

SPMD_AXIS = "spmd"           # the 1-D axis over every local device in SPMD mode

_spmd = [config.read("XLA_USE_SPMD")]   # read once, at import; later: enable_spmd()
_mesh = []
_spmd_mesh = []
_locked = []                 # device data exists: the mode may no longer change


def world_size():
    """Processes in the job (each drives one device)."""
    return config.read("WORLD_SIZE")


def rank():
    """This process's index in the job (its global ordinal)."""
    return config.read("RANK")


def local_rank():
    """This process's index on its host."""
    return config.read("PJRT_LOCAL_PROCESS_RANK")


def local_process_count():
    """Processes of the job on this host."""
    return config.read("LOCAL_WORLD_SIZE")


def host_index():
    """Index of this host in the job."""
    return config.read("GROUP_RANK")


def is_multiprocess():
    return world_size() > 1


def spmd_enabled():
    return _spmd[0]


def enable_spmd():
    """Switch to SPMD (before any device data exists: see `lock`)."""
    if _spmd[0]:
        return
    if _locked:
        raise RuntimeError(
            "torch_xla.runtime.use_spmd() must be called before any tensor is placed on the "
            "XLA device (tensors already on xla:0 live on one device and cannot join the SPMD "
            "device); call use_spmd() at the start of the program, or set XLA_USE_SPMD=1")
    _spmd[0] = True


def lock():
    """Device data now exists: SINGLE/SPMD is fixed from here on."""
    if not _locked:
        _locked.append(True)


def is_locked():
    return bool(_locked)


def mode():
    """SPMD, MULTIPROCESS or SINGLE: which compile strategy the executor uses."""
    if _spmd[0]:
        return SPMD
    return MULTIPROCESS if is_multiprocess() else SINGLE


def local_device_count(kind=None):
    """Devices of this platform (or of `kind`: CPU, CUDA, TPU) on this host that the
    job may use (one process each)."""
    from .platform import device_type
    kind = kind or device_type()
    if kind == "CPU":
        return config.read("CPU_NUM_DEVICES")
    if kind == "CUDA":
        n = config.read("GPU_NUM_DEVICES")
        if n:
            return n
        vis = config.read("CUDA_VISIBLE_DEVICES")
        if vis:
            return len([v for v in vis.split(",") if v.strip()])
        try:
            import subprocess
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
            return max(1, sum(1 for line in out.splitlines() if line.startswith("GPU ")))
        except Exception:  # noqa: BLE001
            return 1
    if kind == "TPU":
        n = config.read("TPU_NUM_DEVICES")
        if n:
            return n
        return max(1, len(glob.glob("/dev/accel*")) or len(glob.glob("/dev/vfio/[0-9]*")))
    return 1


def is_multihost_spmd():
    """SPMD over several processes, one per host: the logical device spans every
    host's devices (jax.distributed joins them)."""
    return _spmd[0] and is_multiprocess()


def spmd_devices():
    """The JAX devices behind the one logical SPMD device, by id (device ids of a
    `Mesh` index this list): this process's, or with one process per host every
    host's."""
    import jax
    from .platform import configure_backend, jax_platform
    from . import distributed
    distributed.maybe_initialize()
    configure_backend()
    with config.jax_env_during_start():
        devs = jax.devices(jax_platform()) if is_multihost_spmd() else jax.local_devices(backend=jax_platform())
    return sorted(devs, key=lambda d: d.id)


def lay_out(arr, sharding):
    """`arr` laid out as `sharding`. Across hosts, jax.device_put cannot move a
    value held by one device to another host's devices; every host holds the same
    value (SPMD programs run alike on each), so each builds its own shards from
    its copy."""
    import jax
    if getattr(arr, "sharding", None) == sharding:
        return arr
    if sharding.is_fully_addressable or not getattr(arr, "is_fully_addressable", True):
        return jax.device_put(arr, sharding)
    pieces = [jax.device_put(arr[idx], d) for d, idx in sharding.addressable_devices_indices_map(arr.shape).items()]
    return jax.make_array_from_single_device_arrays(arr.shape, sharding, pieces)


def host_value(arr):
    """A numpy copy of `arr`'s global value. An array spread over other hosts'
    devices is gathered (every host reads it at the same point of the program);
    a replicated one is read from a local copy."""
    import numpy as np
    if getattr(arr, "is_fully_addressable", True):
        return np.asarray(arr)
    if arr.sharding.is_fully_replicated:
        return np.asarray(arr.addressable_shards[0].data)
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(arr, tiled=True))


def addressable_spmd_device_count():
    """Devices of the logical SPMD device that this process drives."""
    import jax
    me = jax.process_index() if is_multihost_spmd() else None
    return sum(1 for d in spmd_devices() if me is None or d.process_index == me)


def spmd_device_count():
    """Local JAX devices behind the one logical SPMD device."""
    return len(spmd_devices())


def spmd_mesh():
    """The 1-D mesh over every local device (axis SPMD_AXIS): unsharded tensors
    are replicated over it."""
    if not _spmd_mesh:
        import numpy as np
        from jax.sharding import Mesh
        _spmd_mesh.append(Mesh(np.array(spmd_devices()), (SPMD_AXIS,)))
    return _spmd_mesh[0]


def replicated():
    """The sharding of an unsharded tensor in SPMD mode: a full copy on every device."""
    from jax.sharding import NamedSharding, PartitionSpec
    return NamedSharding(spmd_mesh(), PartitionSpec())


def mesh_of(sharding):
    """The jax Mesh `sharding` is laid over, or None (not a NamedSharding)."""
    m = getattr(sharding, "mesh", None)
    return m if getattr(m, "devices", None) is not None else None


def on_mesh(sharding, mesh):
    """`sharding` as a layout over `mesh`. jax.jit takes one
    device order per program, and a user's meshes may list the devices in other
    orders: a layout over another order keeps its tiling where the meshes have the
    same axes (its tiles then sit on other devices), else it becomes replicated;
    either way the value is the same and XLA reshards as the program needs."""
    from jax.sharding import NamedSharding, PartitionSpec
    if tuple(sharding._device_assignment) == tuple(mesh.devices.flat):
        return sharding
    m = mesh_of(sharding)
    if m is not None and m.shape_tuple == mesh.shape_tuple:
        return NamedSharding(mesh, sharding.spec)
    return NamedSharding(mesh, PartitionSpec())


# Several devices in one process: a process that no launcher started, outside
# SPMD, addresses every local device as xla:0..xla:N-1 (upstream does so too).
# `_place[0]` is the index of the device the op being traced works on; the lazy
# layer sets it around each op once a second device has been used.
_place = [0]
_default = [0]


def addressable_device_count():
    """XLA devices this process addresses: every local device when it is alone
    on its host outside SPMD, else one (its own, or the logical SPMD device)."""
    if mode() != SINGLE:
        return 1
    return max(1, local_device_count())


def default_device_index():
    """The device a bare `xla` names (torch_xla.device(n) makes it n)."""
    return _default[0]


def set_default_device_index(index):
    _default[0] = index
    _place[0] = index


def place(index):
    """Set the device index uploads go to; -> the previous one."""
    prev = _place[0]
    _place[0] = index
    return prev


def device_for(index):
    """The JAX device behind `xla:<index>`."""
    from .platform import jax_device, jax_platform
    dev = jax_device()
    if not index:
        return dev
    import jax
    devs = jax.local_devices(backend=jax_platform())
    if index >= len(devs):
        raise RuntimeError(f"torch_xla: xla:{index} does not exist; this process has {len(devs)} devices")
    return devs[index]


def upload_device():
    """Where a tensor moved to `xla:<n>` is placed: the process's device n. In
    SPMD mode the first device: an unsharded tensor lives there until a program
    that also reads sharded data needs it everywhere (the SPMD strategy
    replicates it then), so uploads and all-replicated programs cost one copy,
    not one per device."""
    return device_for(_place[0])


def job_mesh():
    """The 1-D mesh of every process's device, in rank order (axis MESH_AXIS)."""
    if not _mesh:
        import jax
        import numpy as np
        from jax.sharding import Mesh
        from .platform import jax_device
        by_process = {}
        for d in jax.devices():
            if d.process_index not in by_process or d.id < by_process[d.process_index].id:
                by_process[d.process_index] = d
        by_process[jax.process_index()] = jax_device()
        devs = [by_process[i] for i in sorted(by_process)]
        _mesh.append(Mesh(np.array(devs), (MESH_AXIS,)))
    return _mesh[0]
