#!/usr/bin/env bash
# PART before and after an engine change, on the same machine in the same minutes: each round
# runs `remora bench part --sizes 1M,4M --json` with the BEFORE binary, with the AFTER binary,
# and with the AFTER binary and --reorder 0 (the paper's protocol, no reorder window), and
# prints the medians (min..max) of the 4 MiB headline figures and of the model per variant.
# Rounds interleave so that a change in the machine's load touches the three alike.
#   bash bench/part-ab.sh BEFORE_REMORA AFTER_REMORA [ROUNDS] [ITERS]
# The JSON of every run stays in bench/out/part-ab/ (not tracked).
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${1:?usage: bash bench/part-ab.sh BEFORE_REMORA AFTER_REMORA [ROUNDS] [ITERS]}
AFTER=${2:?usage: bash bench/part-ab.sh BEFORE_REMORA AFTER_REMORA [ROUNDS] [ITERS]}
ROUNDS=${3:-5}
ITERS=${4:-20}
out=bench/out/part-ab
rm -rf "$out"
mkdir -p "$out"
echo "bench part A/B: $(date -u +%FT%TZ); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$ROUNDS"); do
  run() { "$2" bench part --sizes 1M,4M --iters "$ITERS" --hol-seconds 0 --json "${@:3}" > "$out/$1-$r.json"; }
  run before "$BEFORE"
  run after "$AFTER"
  run paper "$AFTER" --reorder 0
  echo "round $r of $ROUNDS done" >&2
done
echo "end: $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out" <<'PY'
import glob, json, statistics, sys
keys = ["transfer_only_us", "touch_not_present_us", "pia_us", "pia_nto_us", "pia_to100_us",
        "pio_us", "pio_over_pia", "pia_over_touch_not_present",
        "pia_to100_over_touch_not_present", "pia_nto_over_to100"]
model = ["wave_us", "paper_nto_us", "transfer_cpu_us", "page_in_us", "page_in_cpu_us",
         "round_trip_us", "page_in_elsewhere_us", "page_in_elsewhere_cpu_us",
         "transfer_receive_cpu_us", "shared_core_us",
         "pia_to100_receive_and_page_in_cpu_us"]
by_thread = ["transfer_cpu_us_by_thread", "pia_to100_cpu_us_by_thread"]
def spread(v):
    return f"{statistics.median(v):12.2f} ({min(v):.2f}..{max(v):.2f})"
for name, what in [("before", "BEFORE"), ("after", "AFTER"), ("paper", "AFTER --reorder 0")]:
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/{name}-*.json"))]
    print(f"{what}: {len(runs)} runs, 4 MiB: median (min..max)")
    for k in keys + ["pia_to100_over_transfer_only"]:
        v = [r[k] for r in runs if r.get(k) is not None]
        if k == "pia_to100_over_transfer_only" and not v:
            v = [r["pia_to100_us"] / r["transfer_only_us"] for r in runs]
        if v:
            print(f"  {k:<36} {spread(v)}")
    for k in model:
        v = [r["model"][k] for r in runs
             if isinstance(r.get("model"), dict) and r["model"].get(k) is not None]
        if v:
            print(f"  model {k:<30} {spread(v)}")
    # CPU per thread role (builds that report it): who ran out of core.
    for k in by_thread:
        rows = [r["model"][k] for r in runs
                if isinstance(r.get("model"), dict) and isinstance(r["model"].get(k), dict)]
        for role in sorted(rows[0]) if rows else []:
            print(f"  {k[:-10] + ' ' + role:<42} {spread([x[role] for x in rows])}")
PY
