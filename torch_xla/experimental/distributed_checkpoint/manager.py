"""CheckpointManager: per-step checkpoints of SPMD state dicts.

Layout: `<path>/<step>/` holds one torch.distributed.checkpoint checkpoint and
a `.manager_metadata` file (step and creation time). A checkpoint is written
into `<path>/<step>.partial/` and renamed to `<path>/<step>/` only once every
file, the metadata last, is on storage; a process killed mid-save leaves a
`.partial` folder that is never listed, restored or counted, so the previous
checkpoints stay loadable. `max_to_keep` deletes the oldest by creation time
(not by step), an order that survives restarts because it is read back from the
metadata files.
"""
import collections
import datetime
import logging
import os
import pickle
import queue
import threading
from typing import List, Optional

import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp

import torch_xla

from ._helpers import _sharded_cpu_state_dict
from .planners import SPMDLoadPlanner, SPMDSavePlanner

__all__ = ["CheckpointManager"]

_META = ".manager_metadata"
_PARTIAL = ".partial"


class _Tracked(collections.namedtuple("_Tracked", "step ts")):
    """A committed checkpoint: its step and creation time."""


def _fs_and_root(path):
    import fsspec.core
    fs, root = fsspec.core.url_to_fs(path)
    return fs, root


class CheckpointManager:
    """Save a state dict every `save_interval` steps (`save`, or `save_async` to
    write from a background thread after copying the shards to the host), list
    the committed steps (`all_steps`), `restore` one into a state dict of XLA
    tensors (on any mesh), keep at most `max_to_keep` (0: all). With
    `chkpt_on_preemption`, a SIGTERM makes the next step a checkpoint step
    (`reached_preemption`). `process_group` is the CPU group the collectives of
    torch.distributed.checkpoint use (default: the default group when one
    exists). Any fsspec path works; local paths are renamed atomically."""

    def __init__(self, path: str, save_interval: int, max_to_keep: Optional[int] = 0,
                 max_pending_async: Optional[int] = 1, process_group: Optional[dist.ProcessGroup] = None,
                 chkpt_on_preemption: bool = True):
        if save_interval <= 0:
            raise ValueError("CheckpointManager: save_interval must be positive")
        if max_pending_async is None or max_pending_async <= 0:
            raise ValueError("CheckpointManager: max_pending_async must be positive")
        self.base_path = path
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep or 0
        self.process_group = process_group
        self.chkpt_on_preemption = chkpt_on_preemption
        self._fs, self._root = _fs_and_root(path)
        self._fs.makedirs(self._root, exist_ok=True)
        self._lock = threading.Lock()
        self._tracked = self._read_tracked()
        self._slots = threading.Semaphore(max_pending_async)
        self._jobs = queue.Queue()
        self._worker = threading.Thread(target=self._drain, name="xla-chkpt-manager", daemon=True)
        self._worker.start()
        if chkpt_on_preemption:
            torch_xla._XLAC._activate_preemption_sync_manager()

    # -- bookkeeping -------------------------------------------------------------------------------------

    def _step_path(self, step, partial=False):
        return os.path.join(self._root, str(step) + (_PARTIAL if partial else ""))

    def _read_tracked(self):
        found = []
        for entry in self._fs.ls(self._root, detail=False):
            name = os.path.basename(entry.rstrip("/"))
            if not name.isdigit():
                continue
            try:
                with self._fs.open(os.path.join(entry, _META), "rb") as f:
                    meta = pickle.load(f)
                found.append(_Tracked(int(meta["step"]), meta["ts"]))
            except (FileNotFoundError, OSError, pickle.UnpicklingError, KeyError, EOFError):
                logging.warning("CheckpointManager: ignoring %s (no readable %s)", entry, _META)
        return collections.deque(sorted(found, key=lambda t: t.ts))

    def _is_leader(self):
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(self.process_group) == 0
        import torch_xla.runtime as xr
        return xr.process_index() == 0

    def _barrier(self):
        if dist.is_available() and dist.is_initialized():
            dist.barrier(group=self.process_group)

    def _save(self, step, state_dict):
        """Write `state_dict` as step `step` (synchronously), commit it, drop the oldest."""
        partial, final = self._step_path(step, True), self._step_path(step)
        leader = self._is_leader()
        if leader and self._fs.exists(partial):
            self._fs.rm(partial, recursive=True)
        self._barrier()
        dist_cp.save(state_dict=state_dict, storage_writer=self._writer(partial), planner=SPMDSavePlanner(),
                     process_group=self.process_group)
        self._barrier()
        if leader:
            with self._fs.open(os.path.join(partial, _META), "wb") as f:
                pickle.dump({"step": step, "ts": datetime.datetime.now()}, f)
            with self._lock:
                if self._fs.exists(final):
                    self._fs.rm(final, recursive=True)
                self._fs.mv(partial, final, recursive=True)
        self._barrier()
        with self._lock:
            self._tracked = collections.deque(t for t in self._tracked if t.step != step)
            self._tracked.append(_Tracked(step, datetime.datetime.now()))
            while self.max_to_keep > 0 and len(self._tracked) > self.max_to_keep:
                old = self._tracked.popleft()
                if leader:
                    self._fs.rm(self._step_path(old.step), recursive=True)

    def _writer(self, path):
        if "://" in self.base_path:
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
            return FsspecWriter(path)
        return dist_cp.FileSystemWriter(path)

    def _reader(self, path):
        if "://" in self.base_path:
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
            return FsspecReader(path)
        return dist_cp.FileSystemReader(path)

    def _drain(self):
        while True:
            fn, step, state_dict, started = self._jobs.get()
            started.set()
            try:
                fn(step, state_dict)
            except Exception:   # noqa: BLE001  (a failed background save must not kill later ones)
                logging.exception("CheckpointManager: asynchronous checkpoint of step %s failed", step)
            finally:
                self._slots.release()
                self._jobs.task_done()

    # -- public ------------------------------------------------------------------------------------------

    def should_save(self, step: int) -> bool:
        """Whether `step` is a checkpoint step: a multiple of save_interval, or the
        step at which a preemption was detected."""
        preempted = self.chkpt_on_preemption and self.reached_preemption(step)
        if preempted:
            logging.warning("CheckpointManager: preemption detected at step %s; checkpointing", step)
        return step % self.save_interval == 0 or preempted

    def save(self, step, state_dict, force: Optional[bool] = False) -> bool:
        """Checkpoint `state_dict` now if `step` is a checkpoint step (or `force`).
        Returns whether it did."""
        if not (force or self.should_save(step)):
            return False
        self._save(step, state_dict)
        return True

    def save_async(self, step: int, state_dict, force: Optional[bool] = False) -> bool:
        """Like `save`, but only the copy of the shards to the host happens now; the
        write runs on a background thread (at most max_pending_async at a time:
        beyond that this call waits). Returns whether a checkpoint was started."""
        if not (force or self.should_save(step)):
            return False
        self._slots.acquire()
        try:
            host = _sharded_cpu_state_dict(state_dict)
            idle = self._jobs.unfinished_tasks == 0
            started = threading.Event()
            self._jobs.put((self._save, step, host, started))
        except BaseException:
            self._slots.release()
            raise
        if idle:   # the write of this step is under way when we return (ordering for callers)
            started.wait()
        return True

    def restore(self, step: int, state_dict) -> None:
        """Load step `step` into `state_dict` in place (XLA tensors keep their shardings)."""
        with self._lock:
            steps = [t.step for t in self._tracked]
        if step not in steps:
            raise ValueError(f"CheckpointManager: no committed checkpoint of step {step} in {self.base_path} "
                             f"(tracked: {sorted(steps)})")
        dist_cp.load(state_dict=state_dict, storage_reader=self._reader(self._step_path(step)),
                     planner=SPMDLoadPlanner(), process_group=self.process_group)

    def all_steps(self) -> List[int]:
        """The committed steps this manager can restore."""
        with self._lock:
            return [t.step for t in self._tracked]

    def join(self):
        """Wait for every pending asynchronous checkpoint."""
        self._jobs.join()

    def reached_preemption(self, step: int) -> bool:
        """True once a preemption (SIGTERM) was noticed, at this step or before."""
        if not self.chkpt_on_preemption:
            raise RuntimeError("CheckpointManager: preemption detection is off (chkpt_on_preemption=False)")
        return torch_xla._XLAC._sync_point_reached(step)
