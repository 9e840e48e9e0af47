"""benchmarks/plan_spmd.py: a training step compiled for a virtual mesh without
running, its memory per device beside the ideal, and the collectives XLA inserted."""
import json
import os
import subprocess
import sys

from torch_xla.engine.observe.spmd_report import collectives_per_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_plan_tiny_preset_on_8_devices(tmp_path):
    out = tmp_path / "plan.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_USE_SPMD"):
        env.pop(k, None)   # the script sets its own mesh of CPU devices
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "plan_spmd.py"), "--preset", "tiny",
                        "--mesh", "fsdp=8", "--json", str(out)], env=env, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["devices"] == 8
    got, want = r["per_device"], r["ideal"]
    for k in ("arguments", "outputs", "aliased", "temporaries", "peak"):
        assert got[k] > 0, k
    # parameters and AdamW state donated to their new values
    assert 0.99 <= got["aliased"] / want["aliased"] <= 1.01
    assert 0.9 <= got["peak"] / want["peak"] <= 1.1, (got, want)
    kinds = {c["kind"]: c for c in r["collectives"]}
    assert "all-gather" in kinds and kinds["all-gather"]["count"] > 0 and kinds["all-gather"]["bytes"] > 0
    assert "| peak |" in p.stdout and "compile" in p.stdout


_HLO = """HloModule m

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %ag = f32[64]{0} all-gather(%x), replica_groups={}, dimensions={0}
  %ar = f32[8]{0} all-reduce(%x), replica_groups={}, to_apply=%add
  ROOT %t = (s32[], f32[8]) tuple(%i, %ar)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %w = (s32[], f32[8]) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"32"}}
  ROOT %r = f32[8]{0} all-reduce(%a), replica_groups={}, to_apply=%add
}
"""


def test_collectives_in_a_loop_count_once_per_iteration():
    got = {k: (c, b) for k, c, b in collectives_per_run(_HLO)}
    assert got["all-gather"] == (32, 32 * 64 * 4)
    assert got["all-reduce"] == (33, 33 * 8 * 4)
