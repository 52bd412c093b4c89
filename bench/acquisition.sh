#!/usr/bin/env bash
# The acquisition end to end beside its references, in one run on this machine:
#   - `remora fabric bench write-bw` (UC and RC, 1 MiB messages) on each transport: what the
#     fabric carries between two processes;
#   - `remora bench acquisition --no-process`: the emulator's 8 modules pushing 4M frames into
#     a receiver's ring, highest rate without loss (transfer only);
#   - `remora bench acquisition --with-service`: the whole chain with the pipeline, highest rate
#     without loss, and the pipeline alone on the same frames in the same run; every try also
#     runs under the control service with one live view page open (status stream, previews),
#     interleaved with the plain tries.
# Writes bench/out/acquisition.jsonl and prints the ratios the issue asks for.
# Usage: bash bench/acquisition.sh [MODULES] [FRAMES]   (after `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${REMORA:-${CARGO_TARGET_DIR:-target}/release/remora}
[ -x "$R" ] || { echo "build first: make build (looked for $R)" >&2; exit 1; }
M=${1:-8}; F=${2:-300}
out=bench/out; mkdir -p "$out"; res=$out/acquisition.jsonl; : > "$res"
emit() { echo "{\"name\":\"$1\",\"result\":$2}" >> "$res"; echo "$1: $2"; }
for t in udp shm; do
  for q in uc rc; do
    emit "fabric_${t}_${q}_1m" "$("$R" fabric bench write-bw --transport "$t" --qp "$q" --size 1M --iters 2000 --json)"
  done
  emit "transfer_$t" "$("$R" bench acquisition --transport "$t" --modules "$M" --frames "$F" --no-process --json)"
  emit "e2e_$t" "$("$R" bench acquisition --transport "$t" --modules "$M" --frames "$F" --with-service --json)"
done
python3 - "$res" <<'PY'
import json, sys
r = {}
for line in open(sys.argv[1]):
    o = json.loads(line); r[o["name"]] = o["result"]
for t in ("udp", "shm"):
    fab_uc = r[f"fabric_{t}_uc_1m"]["bw_avg_gbps"] / 8
    fab_rc = r[f"fabric_{t}_rc_1m"]["bw_avg_gbps"] / 8
    tr = r[f"transfer_{t}"]; e = r[f"e2e_{t}"]
    if not tr["zero_loss"]:
        print(f"{t}: transfer only: even {tr['rate_hz']:.1f} frames/s lost frames")
    print(f"{t}: transfer only {tr['transfer_gbps']:.2f} GB/s without loss = "
          f"{tr['transfer_gbps'] / fab_uc:.2f}x fabric UC write-bw ({fab_uc:.2f} GB/s sent), "
          f"{tr['transfer_gbps'] / fab_rc:.2f}x RC ({fab_rc:.2f} GB/s delivered); goal >= 0.8x")
    if not e["zero_loss"]:
        print(f"{t}: end to end: even {e['rate_hz']:.1f} frames/s lost frames ({e['frames_lost']})")
    print(f"{t}: end to end {e['e2e_fps']:.1f} frames/s without loss, pipeline alone {e['pipeline_fps']:.1f}: "
          f"{e['e2e_fps'] / e['pipeline_fps']:.2f}x; goal >= 0.9x (this process used {e['cpu_cores']:.2f} cores)")
    sv = e.get("service")
    if sv:
        print(f"{t}: under the control service with one page open {sv['e2e_fps']:.1f} frames/s without loss = "
              f"{sv['ratio']:.2f}x the plain run; goal >= 0.95x (page: {sv['page']})")
PY
