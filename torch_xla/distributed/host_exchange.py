"""Host-side exchange between the replicas: rendezvous and mesh_reduce.

Payloads travel through jax.distributed's key-value store (the coordinator
runs in ordinal 0). A rendezvous round writes `torch_xla/rdv/<tag>/<round>/<ordinal>`
and reads every participant's key; a participant that does not arrive within
XLA_RENDEZVOUS_TIMEOUT seconds (default: XLA_COLLECTIVE_TIMEOUT, else 1800)
makes the others raise, naming the missing ordinals.
"""
import io
import threading

import torch

from .. import runtime as xr
from ..engine import api as _api

distributed_init = _api.distributed

_rounds = {}
_lock = threading.Lock()


def _timeout_s():
    return _api.config.read("XLA_RENDEZVOUS_TIMEOUT")   # XLA_COLLECTIVE_TIMEOUT when unset


def _client():
    c = distributed_init.client()
    if c is None:
        raise RuntimeError("torch_xla: this process is not part of a multi-process job "
                           "(start it with torch_xla.launch / xmp.spawn / torchrun)")
    return c


def _as_bytes(payload):
    if payload is None:
        return b""
    if isinstance(payload, str):
        return payload.encode()
    if isinstance(payload, torch.Tensor):
        return payload.cpu().numpy().tobytes()
    return bytes(payload)


def rendezvous(tag, payload=b"", replicas=()):
    """Every participant (all ordinals, or `replicas`) waits here; -> their payloads, by ordinal."""
    data = _as_bytes(payload)
    world = xr.world_size()
    if world == 1:
        return [data]
    me = xr.global_ordinal()
    members = sorted(int(r) for r in replicas) if replicas else list(range(world))
    if me not in members:
        return []
    client = _client()
    with _lock:
        rnd = _rounds.get(tag, 0)
        _rounds[tag] = rnd + 1
    prefix = f"torch_xla/rdv/{tag}/{rnd}/"
    client.key_value_set_bytes(prefix + str(me), data)
    timeout_ms = int(_timeout_s() * 1000)
    out = []
    for r in members:
        try:
            out.append(client.blocking_key_value_get_bytes(prefix + str(r), timeout_ms))
        except Exception as e:  # noqa: BLE001 - a timeout (or a dead coordinator)
            missing = _missing(client, prefix, members)
            raise RuntimeError(
                f"torch_xla: rendezvous {tag!r} (round {rnd}) on ordinal {me} waited {_timeout_s():g} s; "
                f"ordinals that never arrived: {missing or [r]} ({type(e).__name__}: {str(e)[:200]})") from None
    if rnd > 0:  # everyone has read the previous round once it reached this one
        try:
            client.key_value_delete(f"torch_xla/rdv/{tag}/{rnd - 1}/{me}")
        except Exception:  # noqa: BLE001
            pass
    return out


def _missing(client, prefix, members):
    try:
        have = {k.rsplit("/", 1)[-1] for k, _ in client.key_value_dir_get_bytes(prefix)}
        return [r for r in members if str(r) not in have]
    except Exception:  # noqa: BLE001
        return None


def _to_cpu(data):
    if isinstance(data, torch.Tensor):
        return data.cpu() if data.device.type == "xla" else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        vals = [_to_cpu(v) for v in data]
        return type(data)(*vals) if hasattr(data, "_fields") else type(data)(vals)
    return data


def mesh_reduce(tag, data, reduce_fn):
    """-> reduce_fn([data of ordinal 0, 1, ...]); XLA tensors come back as CPU tensors."""
    cpu = _to_cpu(data)
    if xr.world_size() == 1:
        return reduce_fn([cpu])
    buf = io.BytesIO()
    torch.save(cpu, buf)
    got = rendezvous(tag, buf.getvalue())
    return reduce_fn([_load_payload(tag, r, b) for r, b in enumerate(got)])


def _load_payload(tag, ordinal, data):
    # the bytes came through the coordinator's store, over the network: loaded as
    # data only (torch.load's weights_only, upstream's default under torch >= 2.6),
    # never as an arbitrary pickle that could run code here
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(
            f"torch_xla: mesh_reduce {tag!r}: the data of ordinal {ordinal} does not load as plain data "
            "(torch.load(weights_only=True): tensors, numbers, strings, None and lists, tuples, dicts "
            f"of them); what travels between processes is never unpickled as code ({type(e).__name__}: "
            f"{str(e)[:300]})") from None
