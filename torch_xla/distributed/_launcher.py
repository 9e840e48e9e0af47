"""One process per device: starting, watching and stopping the replicas.

The parent never starts a JAX backend. It picks the job layout (world size,
this host's ranks, the JAX coordinator address), starts one process per device
with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / XLA_COORDINATOR_ADDRESS
in its environment, and watches them: when one exits non-zero (it raised, or was
killed) the others are stopped at once and the parent raises with the failing
replica's traceback. Replicas die with the parent (PR_SET_PDEATHSIG).

Several hosts: run the same command on each with the same MASTER_ADDR /
MASTER_PORT and XLA_NUM_HOSTS=<hosts>. The launcher that can bind
MASTER_ADDR:MASTER_PORT becomes host 0 and hands out host indices (or each
host gives XLA_HOST_INDEX); the JAX coordinator runs in global rank 0.
The launchers keep their connection open: a failure on one host stops all.
"""
import json
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback

from ..engine import api as _api

distributed_init = _api.distributed

_KILL_GRACE_S = 3.0


class ReplicaFailed(RuntimeError):
    """A replica of a multi-process job exited with an error."""


# ---------------------------------------------------------------------------
# device counts (without starting JAX)

def local_device_count():
    """Devices of this platform on this host (one replica each)."""
    return _api.topology.local_device_count()


def _set_pdeathsig():
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def _watch_parent(parent_pid):
    def loop():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass
    threading.Thread(target=loop, name="torch_xla-parent-watch", daemon=True).start()


def _replica_main(fn, args, env, conn, parent_pid):
    os.environ.update(env)
    if os.getppid() == parent_pid:  # spawn / fork: the kernel kills us with the parent
        _set_pdeathsig()
    _watch_parent(parent_pid)  # forkserver (and a backstop): poll the launcher
    try:
        import faulthandler
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: where is it?
    except Exception:  # noqa: BLE001
        pass
    if os.getppid() == 1:
        os._exit(1)  # the parent died before we could arm the signal
    rank = int(env["RANK"])
    chatter = _NativeChatterFilter.install() if env.get("PJRT_DEVICE") == "CPU" else None
    distributed_init.report_hook = lambda text: _report(conn, rank, text)
    code = 0
    result = None
    try:
        distributed_init.maybe_initialize()
        result = fn(rank, *args)
        _finish_device_work()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            _report(conn, rank, f"SystemExit({e.code!r})")
    except BaseException as exc:  # noqa: BLE001 - every failure ends the job with its traceback
        tb = traceback.format_exc()
        try:   # the exception itself too, when it pickles (run_multiprocess re-raises it)
            conn.send(("exception", rank, exc))
        except Exception:  # noqa: BLE001
            pass
        if not _report(conn, rank, tb):  # the launcher prints it; here only if it cannot
            sys.stderr.write(f"torch_xla: replica {rank} (pid {os.getpid()}) failed:\n{tb}")
        code = 17
    if code:
        _flush(chatter)
        os._exit(code)
    try:
        conn.send(("ok", rank, result))
    except Exception:  # noqa: BLE001 - a result that does not pickle is dropped
        try:
            conn.send(("ok", rank, None))
        except Exception:  # noqa: BLE001
            pass
    distributed_init.shutdown()
    _flush(chatter)
    os._exit(0)  # skip atexit handlers that might wait on peers that are gone


def _finish_device_work():
    try:
        _api.wait_device_ops()
    except Exception:  # noqa: BLE001
        pass


def _report(conn, rank, text):
    try:
        conn.send(("error", rank, text))
        return True
    except Exception:  # noqa: BLE001
        return False


def _flush(chatter=None):
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    if chatter is not None:
        chatter.close()


class _NativeChatterFilter:
    """Drops the C++ connection chatter of JAX's gloo CPU collectives
    ("[Gloo] Rank N is connected to ...", one line per replica, written to fd 1
    by the library) and passes every other line through unchanged.

    fd 1 becomes a pipe that a thread copies to the original stdout; Python's
    sys.stdout keeps its buffering (decided at start-up from the original fd)."""

    _DROP = (b"[Gloo] Rank ",)

    def __init__(self):
        self.orig = os.dup(1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.close(w)
        self.reader = r
        self.thread = threading.Thread(target=self._pump, name="torch_xla-stdout-filter", daemon=True)
        self.thread.start()

    @classmethod
    def install(cls):
        try:
            return cls()
        except OSError:
            return None

    def _pump(self):
        pending = b""
        while True:
            try:
                chunk = os.read(self.reader, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not line.startswith(self._DROP))
            if out:
                os.write(self.orig, out)
        if pending and not pending.startswith(self._DROP):
            os.write(self.orig, pending)
        os.close(self.reader)

    def close(self):
        """Put the original stdout back (the pipe's last writer goes) and drain."""
        try:
            os.dup2(self.orig, 1)
        except OSError:
            return
        self.thread.join(2.0)


# ---------------------------------------------------------------------------
# several hosts: a small TCP rendezvous between the launchers

def _send_msg(sock, obj):
    data = json.dumps(obj).encode()
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _recv_msg(sock):
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    body = _recv_exact(sock, int.from_bytes(head, "big"))
    return None if body is None else json.loads(body.decode())


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class _HostLink:
    """The launchers' connection: host 0 serves, others are clients."""

    def __init__(self, num_hosts, nprocs, addr, port, timeout):
        self.server = None
        self.peers = []
        self.sock = None
        self.failed = threading.Event()
        self.fail_reason = ""
        config = _api.config
        want = config.read("XLA_HOST_INDEX") if config.is_set("XLA_HOST_INDEX") else -1   # -1: any
        srv = None
        if want in (-1, 0):
            try:
                srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                srv.bind((addr, port))
                srv.listen(num_hosts)
            except OSError:
                if srv is not None:
                    srv.close()
                srv = None
                if want == 0:
                    raise
        deadline = time.time() + timeout
        if srv is not None:
            self.server = srv
            self._serve(num_hosts, nprocs, addr, deadline)
        else:
            self._join(nprocs, want, addr, port, deadline)

    def _serve(self, num_hosts, nprocs, addr, deadline):
        counts = {0: nprocs}
        conns = {}
        pending = []
        self.server.settimeout(1.0)
        while len(counts) < num_hosts:
            if time.time() > deadline:
                raise TimeoutError(f"torch_xla: only {len(counts)} of {num_hosts} hosts joined at "
                                   f"{addr} (XLA_NUM_HOSTS={num_hosts})")
            try:
                c, _ = self.server.accept()
            except socket.timeout:
                continue
            c.settimeout(None)
            msg = _recv_msg(c)
            if msg is None:
                c.close()
                continue
            idx = msg.get("host_index", -1)
            if idx < 0 or idx in counts:
                idx = min(i for i in range(1, num_hosts + 1) if i not in counts)
            counts[idx] = msg["nprocs"]
            conns[idx] = c
            pending.append(c)
        coord_port = distributed_init.free_port(addr)
        layout = [counts[i] for i in range(num_hosts)]
        for idx, c in conns.items():
            _send_msg(c, {"host_index": idx, "layout": layout, "coordinator": f"{addr}:{coord_port}"})
        self.peers = list(conns.values())
        self.host_index = 0
        self.layout = layout
        self.coordinator = f"{addr}:{coord_port}"
        for c in self.peers:
            threading.Thread(target=self._watch, args=(c, True), daemon=True).start()

    def _join(self, nprocs, want, addr, port, deadline):
        last = None
        while True:
            try:
                s = socket.create_connection((addr, port), timeout=5)
                break
            except OSError as e:
                last = e
                if time.time() > deadline:
                    raise TimeoutError(f"torch_xla: could not reach the launcher of host 0 at {addr}:{port}: {last}")
                time.sleep(0.2)
        s.settimeout(None)
        _send_msg(s, {"nprocs": nprocs, "host_index": want})
        msg = _recv_msg(s)
        if msg is None:
            raise RuntimeError("torch_xla: host 0's launcher closed the connection during rendezvous")
        self.sock = s
        self.host_index = msg["host_index"]
        self.layout = msg["layout"]
        self.coordinator = msg["coordinator"]
        threading.Thread(target=self._watch, args=(s, False), daemon=True).start()

    def _watch(self, c, relay):
        try:
            msg = _recv_msg(c)
        except OSError:
            msg = None
        if msg is not None and msg.get("done"):
            return
        reason = (msg or {}).get("fail") or "a launcher on another host disconnected"
        self.fail_reason = reason
        self.failed.set()
        if relay:
            self.broadcast_failure(reason)

    def broadcast_failure(self, reason):
        for c in self.peers + ([self.sock] if self.sock else []):
            try:
                _send_msg(c, {"fail": reason})
            except OSError:
                pass

    def done(self):
        for c in self.peers + ([self.sock] if self.sock else []):
            try:
                _send_msg(c, {"done": True})
            except OSError:
                pass

    def close(self):
        for c in self.peers + ([self.sock] if self.sock else []):
            try:
                c.close()
            except OSError:
                pass
        if self.server is not None:
            self.server.close()


# ---------------------------------------------------------------------------
# the parent side

class Job:
    def __init__(self, procs, conns, link):
        self.procs = procs        # rank -> Process
        self.conns = conns        # rank -> parent end of the pipe
        self.link = link
        self.errors = {}
        self.exceptions = {}      # rank -> the exception a failed replica raised (when it pickles)
        self.results = {}         # rank -> what fn returned (when it pickles)

    @property
    def processes(self):
        """The replica processes in rank order (torch.multiprocessing's ProcessContext has these)."""
        return [self.procs[r] for r in sorted(self.procs)]

    def pids(self):
        return [p.pid for p in self.processes]

    def _drain(self):
        for rank, c in list(self.conns.items()):
            try:
                while c.poll():
                    kind, r, payload = c.recv()
                    if kind == "error":
                        self.errors[r] = payload
                    elif kind == "exception":
                        self.exceptions[r] = payload
                    elif kind == "ok":
                        self.results[r] = payload
            except (EOFError, OSError):
                self.conns.pop(rank, None)

    def join(self, timeout=None):
        """Wait for every replica: True once all finished, False if `timeout`
        seconds passed first (torch.multiprocessing's ProcessContext.join);
        ReplicaFailed when one failed."""
        from multiprocessing.connection import wait
        failed = None
        deadline = None if timeout is None else time.time() + timeout
        try:
            while True:
                alive = [p for p in self.procs.values() if p.exitcode is None]
                for rank, p in self.procs.items():
                    if p.exitcode not in (None, 0):
                        failed = (rank, p.exitcode)
                        break
                if failed or not alive:
                    break
                if self.link is not None and self.link.failed.is_set():
                    failed = (None, self.link.fail_reason)
                    break
                if deadline is not None and time.time() >= deadline:
                    return False
                # read results as they come: a large one would block its sender
                wait([p.sentinel for p in alive] + list(self.conns.values()), timeout=0.5)
                self._drain()
        except KeyboardInterrupt:
            self.stop()
            raise
        self._drain()
        if failed is None:
            if self.link is not None:
                self.link.done()
                self.link.close()
            return True
        self.stop()
        self._drain()
        rank, code = failed
        if rank is None:
            msg = f"torch_xla: the job failed on another host: {code}"
        else:
            how = (f"was killed by signal {signal.Signals(-code).name}" if isinstance(code, int) and code < 0
                   else f"exited with code {code}")
            msg = f"torch_xla: replica {rank} (pid {self.procs[rank].pid}) {how}"
            tb = self.errors.get(rank)
            if tb:
                msg += f":\n{tb}"
            others = {r: t for r, t in self.errors.items() if r != rank}
            for r, t in sorted(others.items()):
                msg += f"\n-- replica {r} also failed:\n{t}"
            if self.link is not None:
                self.link.broadcast_failure(f"replica {rank} {how}")
        if self.link is not None:
            self.link.close()
        err = ReplicaFailed(msg)
        err.rank = rank
        raise err

    def stop(self):
        """SIGTERM every live replica, then SIGKILL the ones still there."""
        live = [p for p in self.procs.values() if p.exitcode is None]
        for p in live:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.time() + _KILL_GRACE_S
        for p in live:
            p.join(max(0.0, deadline - time.time()))
        for p in live:
            if p.exitcode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.join(5)


def _strip_device_count_flag(flags):
    return " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))


def start(fn, args=(), nprocs=None, daemon=False, start_method="spawn"):
    """Start the replicas of this host; -> Job."""
    device_type = _api.device_type
    local = nprocs if nprocs else local_device_count()
    if device_type() != "CPU" and nprocs and nprocs != local_device_count():
        import warnings
        warnings.warn(f"nprocs={nprocs} ignored: one process per device ({local_device_count()})")
        local = local_device_count()
    config = _api.config
    num_hosts = config.read("XLA_NUM_HOSTS")
    master = config.read("MASTER_ADDR")
    link = None
    if num_hosts > 1:
        port = config.read("MASTER_PORT")
        link = _HostLink(num_hosts, local, master, port, distributed_init.init_timeout())
        host_index, layout, coordinator = link.host_index, link.layout, link.coordinator
    else:
        host_index, layout = 0, [local]
        port = config.read("MASTER_PORT") if config.is_set("MASTER_PORT") else None   # None: a free one
        if port and distributed_init.port_in_use(master, port):
            # joining a coordinator that serves another job would abort that job
            raise RuntimeError(
                f"torch_xla: port {port} on {master} (MASTER_PORT) is in use by another job; "
                "choose another MASTER_PORT, or leave it unset to pick a free one")
        coordinator = f"{master}:{port or distributed_init.free_port(master)}"
    world = sum(layout)
    offset = sum(layout[:host_index])
    requested, start_method = start_method, _fork_safe(start_method)
    _announce(device_type(), local, world, len(layout), host_index, coordinator)
    ctx = multiprocessing.get_context(start_method)
    procs, conns = {}, {}
    base_env = {
        "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local), "GROUP_RANK": str(host_index),
        "XLA_COORDINATOR_ADDRESS": coordinator, "MASTER_ADDR": master,
        "XLA_NUM_HOSTS": str(len(layout)), "PJRT_DEVICE": device_type(),
    }
    if port is None and num_hosts <= 1:
        # for torch.distributed's env:// (its TCPStore); jax's coordinator has its own port
        base_env["MASTER_PORT"] = str(distributed_init.free_port(master))
    if num_hosts <= 1 and not config.is_set("XLA_SHARE_COMPILATION_SECRET"):
        # signs the executables the replicas share (engine/compile/share.py); it reaches
        # them through their environment, never the network. Across hosts the user gives one.
        import secrets
        base_env["XLA_SHARE_COMPILATION_SECRET"] = secrets.token_hex(32)
    saved = dict(os.environ)
    try:
        for local_rank in range(local):
            env = dict(base_env, RANK=str(offset + local_rank), LOCAL_RANK=str(local_rank))
            if device_type() == "CPU" and config.is_set("XLA_FLAGS"):
                env["XLA_FLAGS"] = _strip_device_count_flag(config.read("XLA_FLAGS"))
            os.environ.update(env)
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_replica_main, args=(fn, args, env, child_end, os.getpid()),
                            daemon=daemon, name=f"xla-replica-{offset + local_rank}")
            try:
                p.start()
            except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as e:
                if start_method == requested or requested != "fork":
                    raise
                raise RuntimeError(
                    "torch_xla: the XLA runtime is already initialized in this process, so replicas cannot be "
                    "forked from it safely (they could hang), and the function or its arguments do not "
                    f"pickle for a fresh process ({type(e).__name__}: {e}). Start the replicas before using "
                    "the XLA device in the launching process.") from e
            child_end.close()
            procs[offset + local_rank] = p
            conns[offset + local_rank] = parent_end
    except BaseException:
        Job(procs, conns, link).stop()
        raise
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Job(procs, conns, link)


def _fork_safe(start_method):
    """A forked replica inherits this process's JAX runtime mid-use (its threads
    gone, their locks possibly held): once the device is up here, fork can hang a
    replica. Start fresh processes instead when fn and args pickle; otherwise
    say so rather than hang."""
    if start_method != "fork" or not _api.is_initialized():
        return start_method
    return "spawn"   # start() turns a failure to pickle fn or args into a clear error


def _announce(device, local, world, hosts, host_index, coordinator):
    where = f"host {host_index} of {hosts}, " if hosts > 1 else ""
    sys.stderr.write(f"torch_xla: starting {local} replica processes on {device} ({where}world size {world}, "
                     f"coordinator {coordinator}); each imports torch and JAX and compiles its first step "
                     "before printing\n")
    sys.stderr.flush()


def run_single(fn, args):
    """nprocs=1: run fn(0, *args) in this process."""
    fn(0, *args)
    return None
