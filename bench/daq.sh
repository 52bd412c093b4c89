#!/usr/bin/env bash
# JUNGFRAU processing core: remora's stages (`remora bench jungfrau`) and its peers (numpy
# conversion, pyFAI integrate1d_ng, memcpy) on the same synthetic frames in one run, with 1 and
# 2 threads; writes bench/out/daq.md (bench/out is not tracked: copy what holds into
# docs/bench/daq.md by hand). Usage: bash bench/daq.sh [modules] [frames]
set -euo pipefail
cd "$(dirname "$0")/.."
modules=${1:-8}
frames=${2:-30}
tgt=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p remora-cli
remora=${REMORA:-$tgt/release/remora}
[ -x .venv/bin/python ] || bash scripts/test-deps.sh
.venv/bin/python -c "import remora.daq" 2>/dev/null || .venv/bin/maturin develop --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cut -d' ' -f1-3 /proc/loadavg > "$out/load"
for t in 1 2; do
  # /usr/bin/time: how much CPU the run got, i.e. how much other jobs took.
  /usr/bin/time -f "%U %S %e" -o "$out/time_$t" \
    "$remora" bench jungfrau --modules "$modules" --frames "$frames" --threads "$t" --json > "$out/remora_$t.json"
  OMP_NUM_THREADS=$t .venv/bin/python bench/daq_peers.py --modules "$modules" --frames "$frames" --threads "$t" > "$out/peers_$t.json"
done
mkdir -p bench/out
.venv/bin/python bench/daq_report.py "$out" "bash bench/daq.sh $modules $frames" bench/out/daq.md
echo "wrote bench/out/daq.md (docs/bench/daq.md is updated from it by hand)"
