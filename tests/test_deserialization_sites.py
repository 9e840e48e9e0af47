"""Nothing that arrives over the network is deserialized as code.

Every call in the package that can run code while reading data (pickle and
its relatives, marshal, eval/exec, torch.load without weights_only=True,
JAX's executable loaders) is listed below with what it reads. Data from other
processes (jax.distributed's key-value store, the launchers' sockets) is
read only as data: JSON, ints, torch.load(weights_only=True), and in
engine/compile/share.py executables whose HMAC under the job's secret
verified first. A new site fails this test until it is listed here, with
its reason; a listed site that is gone fails it too.
"""
import ast
import os

import torch_xla

PKG = os.path.dirname(torch_xla.__file__)

# dotted call names that deserialize code-capable data
RISKY = {
    "pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.loads", "cPickle.loads",
    "cloudpickle.load", "cloudpickle.loads", "dill.load", "dill.loads",
    "marshal.load", "marshal.loads", "shelve.open", "yaml.load", "yaml.unsafe_load",
    "eval", "exec",
    "serialize_executable.deserialize_and_load", "deserialize_executable",
}

# (file relative to torch_xla/, call) -> what it reads
ALLOWED = {
    ("engine/compile/persistent.py", "pickle.load"):
        "the persistent compilation cache on local disk (xr.initialize_cache's directory, trusted "
        "like JAX's own compilation cache; its executables are machine code anyway)",
    ("engine/compile/persistent.py", "serialize_executable.deserialize_and_load"):
        "the same local cache's executables",
    ("engine/compile/share.py", "deserialize_executable"):
        "an executable from the key-value store, only after its HMAC under "
        "XLA_SHARE_COMPILATION_SECRET (never sent over the network) verified",
    ("experimental/distributed_checkpoint/manager.py", "pickle.load"):
        "the checkpoint directory's step metadata, as upstream (torch.distributed.checkpoint "
        "itself unpickles that directory's .metadata)",
    ("debug/metrics_compare_utils.py", "eval"):
        "threshold expressions the caller passes in (no builtins)",
    ("debug/model_comparator.py", "torch.load"):
        "two local files the caller names (torch's default weights_only=True)",
    ("distributed/fsdp/state_dict_utils.py", "torch.load"):
        "the user's own shard checkpoint files, as upstream (weights_only=False)",
    ("utils/serialization.py", "torch.load"):
        "the user's own sharded save folder, as upstream (weights_only=False)",
}


def _name(func):
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ".".join(reversed(parts)) if len(parts) > 1 else ""   # obj().eval() is no builtin
    parts.append(func.id)
    return ".".join(reversed(parts))


def _weights_only_true(call):
    return any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _sites():
    found = {}
    for dirpath, _dirs, files in os.walk(PKG):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, PKG).replace(os.sep, "/")
            for node in ast.walk(ast.parse(open(path).read(), path)):
                if not isinstance(node, ast.Call):
                    continue
                name = _name(node.func)
                short = name.rsplit(".", 1)[-1]
                if name == "torch.load" and _weights_only_true(node):
                    continue
                if name in RISKY or name == "torch.load" or (
                        short in ("deserialize_executable", "deserialize_and_load", "Unpickler")):
                    key = (rel, "deserialize_executable" if short == "deserialize_executable" else name)
                    found.setdefault(key, []).append(node.lineno)
    return found


def test_every_site_that_can_run_code_while_reading_is_listed():
    found = _sites()
    unlisted = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unlisted, f"deserialization sites not in ALLOWED (file, call): lines {unlisted}"
    gone = [k for k in ALLOWED if k not in found]
    assert not gone, f"ALLOWED lists sites that are gone: {gone}"


def test_the_network_paths_read_data_only():
    found = _sites()
    for rel in ("engine/compile/share.py", "distributed/host_exchange.py", "distributed/_launcher.py",
                "engine/runtime/distributed.py", "distributed/xla_backend.py", "engine/compile/job.py"):
        calls = {c for (r, c) in found if r == rel}
        assert calls <= {"deserialize_executable"}, (rel, calls)
    share = open(os.path.join(PKG, "engine", "compile", "share.py")).read()
    # no pickle, and not jax.experimental.serialize_executable (a pickle of JAX's objects)
    assert "import pickle" not in share and "import serialize_executable" not in share
