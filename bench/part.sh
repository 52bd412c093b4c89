#!/usr/bin/env bash
# PART (page-fault-tolerant transfers): `remora bench part` once with --json (written to
# bench/out/$NAME.json) and once as tables (bench/out/$NAME.txt, also on stdout); with RUNS=N,
# N-1 more JSON runs go to bench/out/$NAME.runs.jsonl and the headline ratios' spread is printed.
# NAME defaults to part.
# bench/out is not tracked: docs/bench/part.md is updated from these files by hand.
# Usage: bash bench/part.sh [remora bench part options, e.g. --iters 50]
#        NO_BUILD=1 skips `cargo build --release -p remora-cli`; REMORA=path picks the binary;
#        e.g. NAME=part-w256 RUNS=5 bash bench/part.sh --window 256
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${NO_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p remora-cli
fi
R=${REMORA:-${CARGO_TARGET_DIR:-target}/release/remora}
[ -x "$R" ] || { echo "no remora binary at $R (build it, or set REMORA)" >&2; exit 1; }
out=bench/out
mkdir -p "$out"
RUNS=${RUNS:-1}
NAME=${NAME:-part}

machine() {
  echo "$(date -u +%FT%TZ); $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1);" \
    "Linux $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg);" \
    "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?');" \
    "RLIMIT_MEMLOCK $(ulimit -l)"
}

echo "bench part (json): $(machine)" | tee "$out/$NAME.txt" >&2
"$R" bench part --json "$@" > "$out/$NAME.json"
echo "bench part (tables): $(machine)" | tee -a "$out/$NAME.txt" >&2
"$R" bench part "$@" | tee -a "$out/$NAME.txt"
echo "after: $(machine)" | tee -a "$out/$NAME.txt" >&2

if [ "$RUNS" -gt 1 ]; then
  cp "$out/$NAME.json" "$out/$NAME.runs.jsonl"
  for _ in $(seq 2 "$RUNS"); do
    "$R" bench part --json --hol-seconds 0 "$@" >> "$out/$NAME.runs.jsonl"
  done
  python3 - "$out/$NAME.runs.jsonl" <<'PY' | tee -a "$out/$NAME.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = ["transfer_only_us", "pio_us", "pi4_us", "pia_us", "touch_not_present_us",
        "pin_not_present_us", "pia_to100_us", "pia_nto_us", "pio_over_pia",
        "pia_over_touch_not_present", "pia_to100_over_touch_not_present", "pia_nto_over_to100"]
print(f"{len(runs)} runs at {runs[0]['bytes']} bytes: median (min..max)")
for k in keys:
    v = [r[k] for r in runs if r.get(k) is not None]
    if v:
        print(f"  {k:<28} {statistics.median(v):12.2f} ({min(v):.2f}..{max(v):.2f})")
PY
fi
echo "wrote $out/$NAME.json and $out/$NAME.txt (docs/bench/part.md is updated from them by hand)" >&2
