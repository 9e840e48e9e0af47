#!/usr/bin/env bash
# Run Lightning's own XLA test cases against this torch_xla, on CPU devices.
#
#   LIGHTNING_SRC=/path/to/pytorch-lightning bash scripts/run_lightning_xla_tests.sh [tpu|plain|all]
#
# LIGHTNING_SRC is a checkout of Lightning's repository (its tests/ folder is used; tag 2.6.5
# matches pytorch-lightning 2.6.x). The tests are copied to a scratch folder and their
# `lightning.pytorch` / `lightning.fabric` imports rewritten to the installed
# `pytorch_lightning` / `lightning_fabric` packages, as Lightning's own CI does.
# Tiers (cases listed in scripts/lightning_xla_cases.tsv):
#   tpu:   the RunIf(tpu=True) cases, PL_RUN_TPU_TESTS=1 PJRT_DEVICE=CPU CPU_NUM_DEVICES=4
#   plain: the ordinary CPU-CI cases named xla/tpu, without PJRT_DEVICE
# Per-case outcomes go to $OUT_DIR/<tier>.tsv (default OUT_DIR=./lightning-xla-results); with
# BASELINE=<tsv of upstream outcomes> each line also shows upstream's outcome.
# Each tier is bounded by TIER_TIMEOUT seconds (default 3600), each standalone case by CASE_TIMEOUT
# (default 600); SKIP_STANDALONE=1 leaves the RunIf(standalone=True) cases skipped.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
if [ -z "${LIGHTNING_SRC:-}" ] || [ ! -d "${LIGHTNING_SRC}/tests/tests_pytorch" ]; then
    echo "SKIP: set LIGHTNING_SRC to a Lightning checkout (with tests/tests_pytorch) to run its XLA tests" >&2
    exit 0
fi
TIERS="${1:-all}"
[ "$TIERS" = all ] && TIERS="tpu plain"
OUT_DIR="${OUT_DIR:-$PWD/lightning-xla-results}"
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp -r "$LIGHTNING_SRC/tests" "$WORK/tests"
grep -rlE "lightning\.(fabric|pytorch)|from lightning import" "$WORK/tests/tests_fabric" "$WORK/tests/tests_pytorch" \
    | xargs sed -i 's/lightning\.fabric/lightning_fabric/g; s/lightning\.pytorch/pytorch_lightning/g; s/from lightning import pytorch as pl/import pytorch_lightning as pl/g'
PY="${PYTHON:-python3}"
export PYTHONPATH="$REPO:$WORK/tests${PYTHONPATH:+:$PYTHONPATH}"
# Lightning's Trainer logs to TensorBoard by default: its tests need one of the two writers
if ! "$PY" -c "import tensorboardX" 2>/dev/null && ! "$PY" -c "import tensorboard" 2>/dev/null; then
    echo "installing tensorboardX (Lightning's default logger needs a TensorBoard writer)"
    "$PY" -m pip install -q tensorboardX
fi

for tier in $TIERS; do
    # one case id a line: some ids hold spaces (test_tpu_misconfiguration[9, ])
    mapfile -t cases < <(awk -F'\t' -v t="$tier" '$1==t{print $2}' "$HERE/lightning_xla_cases.tsv")
    [ "${#cases[@]}" -eq 0 ] && continue
    echo "== tier $tier: ${#cases[@]} cases"
    if [ "$tier" = tpu ]; then
        envs=(env PL_RUN_TPU_TESTS=1 PJRT_DEVICE=CPU CPU_NUM_DEVICES=4)
    else
        envs=(env -u PJRT_DEVICE -u CPU_NUM_DEVICES -u PL_RUN_TPU_TESTS)
    fi
    # pytest refuses the whole run when one id is not there (a Lightning version without it):
    # keep the ids its collection finds; the others are reported not-run
    mapfile -t files < <(printf '%s\n' "${cases[@]}" | sed 's/::.*//' | sort -u)
    mapfile -t cases < <(cd "$WORK" && "${envs[@]}" "$PY" -m pytest -q -p no:cacheprovider --collect-only "${files[@]}" 2>/dev/null \
        | "$PY" -c '
import sys
found = {line.strip() for line in sys.stdin if "::" in line}
for case in open(sys.argv[1]).read().splitlines():
    if case in found:
        print(case)' <(printf '%s\n' "${cases[@]}"))
    echo "   ${#cases[@]} of them collected"
    # one stuck case must not take the tier with it: pytest-timeout bounds each case when present
    per_case=()
    "$PY" -c "import pytest_timeout" 2>/dev/null && per_case=(--timeout "${CASE_TIMEOUT:-600}")
    (cd "$WORK" && timeout --kill-after=30 "${TIER_TIMEOUT:-3600}" "${envs[@]}" "$PY" -m pytest -q -p no:cacheprovider "${per_case[@]}" \
        --junitxml="$OUT_DIR/$tier.xml" "${cases[@]}" > "$OUT_DIR/$tier.log" 2>&1)
    echo "   pytest exit $? (log: $OUT_DIR/$tier.log)"
    rm -f "$OUT_DIR/$tier".standalone-*.xml
    if [ "$tier" = tpu ] && [ "${SKIP_STANDALONE:-0}" != 1 ]; then
        # RunIf(standalone=True) cases run one per process, as Lightning's standalone runner does
        standalone=$("$PY" - "$OUT_DIR/$tier.xml" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).iter("testcase"):
    for child in tc:
        if child.tag == "skipped" and "Standalone" in (child.get("message") or ""):
            mod, _, cls = tc.get("classname").partition(".Test")
            path = mod.replace(".", "/") + ".py"
            print(path + ("::Test" + cls if cls else "") + "::" + tc.get("name"))
PYEOF
)
        i=0
        while IFS= read -r case; do
            [ -z "$case" ] && continue
            i=$((i + 1))
            (cd "$WORK" && timeout --kill-after=30 "${CASE_TIMEOUT:-600}" "${envs[@]}" PL_RUN_STANDALONE_TESTS=1 \
                "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT_DIR/$tier.standalone-$i.xml" "$case" \
                >> "$OUT_DIR/$tier.log" 2>&1)
            echo "   standalone $case: exit $?"
        done <<< "$standalone"
    fi
    "$PY" - "$tier" "$HERE/lightning_xla_cases.tsv" "${BASELINE:-}" "$OUT_DIR/$tier.xml" "$OUT_DIR/$tier".standalone-*.xml \
        > "$OUT_DIR/$tier.tsv" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
tier, cases_path, baseline = sys.argv[1:4]
xml_paths = sys.argv[4:]
wanted = [l.split("\t")[1].strip() for l in open(cases_path) if l.startswith(tier + "\t")]
ours = {}
for xml_path in xml_paths:
  try:
    for tc in ET.parse(xml_path).iter("testcase"):
        key = tc.get("classname", "") + "." + tc.get("name")
        outcome, detail = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome, detail = ("failed" if child.tag == "failure" else "error"), (child.get("message") or "")
            elif child.tag == "skipped":
                outcome, detail = "skipped", (child.get("message") or "")
        ours[key] = (outcome, detail)
  except (FileNotFoundError, ET.ParseError):
    pass
base = {}
if baseline:
    for line in open(baseline):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 3 and f[0] == tier:
            base[f[1]] = f[2]
counts = {}
for case in wanted:
    file_part, _, rest = case.partition("::")
    key = file_part[:-3].replace("/", ".") + "." + rest.replace("::", ".")
    outcome, detail = ours.get(key, ("not-run", "no result (timeout or collection error)"))
    counts[outcome] = counts.get(outcome, 0) + 1
    print(f"{case}\t{outcome}\t{base.get(case, '')}\t{detail.splitlines()[0][:200] if detail else ''}")
print("# " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(wanted)})", file=sys.stderr)
PYEOF
done
