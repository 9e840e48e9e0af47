"""TPU host facts, read from the PCI bus and the environment.

Nothing here starts a runtime or talks to the network, so a probe on a machine
without a TPU (Lightning's `accelerator="auto"`) costs a directory listing and
answers 0. When `PJRT_DEVICE` names a platform, the device counts are that
platform's devices: Lightning's `accelerator="tpu"` then runs on them.
"""
import glob
import os
import re
from typing import List, NamedTuple, Optional

from ..engine import api as _api

_config = _api.config
_GOOGLE_PCI_VENDOR_ID = "0x1ae0"
# PCI device ids of TPU chips: v2/v3, v4, v5e, v5p, v6e
_TPU_PCI_DEVICE_IDS = ("0x0027", "0x005e", "0x0063", "0x0062", "0x006f")


class MeshShape(NamedTuple):
    """A TPU bounds string such as '2,2,1' as a shape."""
    x: int
    y: int
    z: int

    @classmethod
    def from_string(cls, mesh: str):
        return cls(*(int(d) for d in mesh.split(",")))

    @property
    def size(self) -> int:
        return self.x * self.y * self.z


def _platform_named() -> bool:
    return _config.is_set("PJRT_DEVICE")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def num_available_chips() -> int:
    """TPU chips attached to this host through PCI (0 on a machine without one)."""
    n = 0
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        if _read(vendor) != _GOOGLE_PCI_VENDOR_ID:
            continue
        if _read(os.path.join(os.path.dirname(vendor), "device")) in _TPU_PCI_DEVICE_IDS:
            n += 1
    return n


def _accelerator_type() -> Optional[str]:
    return _config.read("TPU_ACCELERATOR_TYPE") or None   # else ACCELERATOR_TYPE


def version() -> int:
    """The TPU generation (2, 3, 4, 5, 6) from the accelerator type, e.g. 'v4-8'.

    Raises EnvironmentError on a host that names no TPU."""
    acc = _accelerator_type()
    m = re.match(r"^(?:v|tpu)(\d)[A-Za-z]*-(\d+)$", acc or "")
    if not m:
        raise EnvironmentError(
            "torch_xla: no TPU accelerator type on this host "
            f"(TPU_ACCELERATOR_TYPE / ACCELERATOR_TYPE = {acc!r})")
    return int(m.group(1))


def get_tpu_type() -> str:
    """The TPU type without its size: 'v6e-8' -> 'v6e'."""
    acc = _accelerator_type()
    if not acc:
        raise EnvironmentError("torch_xla: no TPU accelerator type on this host")
    return acc.split("-", 1)[0]


def num_logical_cores_per_chip() -> int:
    """XLA devices per TPU chip: 2 on v2/v3, 1 from v4 on."""
    try:
        return 2 if version() <= 3 else 1
    except EnvironmentError:
        return 1


def num_available_devices() -> int:
    """XLA devices on this host, without starting the runtime.

    With `PJRT_DEVICE` set, the devices of that platform this package would use
    (CPU_NUM_DEVICES host devices, the GPUs, the TPU chips); otherwise the TPU
    devices found on the PCI bus, 0 on a machine without a TPU."""
    if _platform_named():
        return _api.topology.local_device_count()
    return num_available_chips() * num_logical_cores_per_chip()


def process_bounds_size() -> Optional[int]:
    """Processes over every TPU host (TPU_PROCESS_BOUNDS), or None when unset."""
    bounds = _config.read("TPU_PROCESS_BOUNDS")
    return MeshShape.from_string(bounds).size if bounds else None


def num_local_processes() -> int:
    """Processes to start on this host: one per device."""
    local = num_available_devices()
    total = process_bounds_size()
    return local if not total else min(local, total)


def get_worker_ips() -> List[str]:
    """TPU worker host names (TPU_WORKER_HOSTNAMES), ['localhost'] for one host."""
    names = [h for h in _config.read("TPU_WORKER_HOSTNAMES").split(",") if h]
    return names if len(names) > 1 else ["localhost"]


def num_tpu_workers() -> int:
    """Hosts in this TPU slice."""
    return len(get_worker_ips())


def num_expected_global_devices() -> int:
    """Devices over every host of the slice."""
    return num_available_devices() * num_tpu_workers()


def task_id() -> Optional[int]:
    """This process's index among the TPU worker processes (CLOUD_TPU_TASK_ID)."""
    return _config.read("CLOUD_TPU_TASK_ID")


def worker_id() -> int:
    """This host's index in the slice (TPU_WORKER_ID, 0 by default)."""
    return _config.read("TPU_WORKER_ID")


def configure_one_chip_topology() -> None:
    """Make one process see one chip (before any device is used)."""
    os.environ.setdefault("TPU_VISIBLE_CHIPS", "0")
    os.environ.setdefault("TPU_PROCESS_BOUNDS", "1,1,1")
    os.environ.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")


def configure_topology(local_rank: int, local_world_size: int, base_port: int = 8476) -> None:
    """Per-process TPU visibility for one process per chip; the launcher sets
    the rest of the job's environment itself."""
    os.environ.setdefault("TPU_VISIBLE_CHIPS", str(local_rank))
    os.environ.setdefault("TPU_PROCESS_PORT", str(base_port + local_rank))


def discover_master_worker_ip(use_localhost: bool = True) -> str:
    """The first worker's address: MASTER_ADDR, else localhost on one host."""
    if _config.is_set("MASTER_ADDR"):
        return _config.read("MASTER_ADDR")
    ips = get_worker_ips()
    return "localhost" if use_localhost and len(ips) == 1 else ips[0]
