#!/usr/bin/env bash
# Two remora builds side by side in one run: the same fabric and lazy benchmarks with build A
# and build B, interleaved round by round so that both see the same machine load. Prints the
# median of each figure per build and the ratio B/A (what a change costs or gains), and writes
# bench/out/ab.md (bench/out is not tracked: copy what holds into docs/bench/ by hand).
# Usage: bash bench/ab.sh A_REMORA B_REMORA [ROUNDS]
#   e.g. git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release -p remora-cli)
#        bash bench/ab.sh /tmp/before/target/release/remora target/release/remora 5
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: bash bench/ab.sh A_REMORA B_REMORA [ROUNDS]}
B=${2:?usage: bash bench/ab.sh A_REMORA B_REMORA [ROUNDS]}
ROUNDS=${3:-5}
for r in "$A" "$B"; do [ -x "$r" ] || { echo "not an executable: $r" >&2; exit 1; }; done
out=bench/out; mkdir -p "$out"; res=$out/ab.jsonl; : > "$res"

# name | arguments | JSON field (higher is better: bw, lower: latencies)
cases=(
  "fabric udp WRITE bw 64 KiB (Gb/s)|fabric bench write-bw --transport udp --size 64K --iters 8000|bw_avg_gbps"
  "fabric shm WRITE bw 64 KiB (Gb/s)|fabric bench write-bw --transport shm --size 64K --iters 8000|bw_avg_gbps"
  "fabric shm WRITE bw 1 MiB (Gb/s)|fabric bench write-bw --transport shm --size 1M --iters 2000|bw_avg_gbps"
  "fabric tcp WRITE bw 64 KiB (Gb/s)|fabric bench write-bw --transport tcp --size 64K --iters 8000|bw_avg_gbps"
  "fabric udp WRITE lat 8 B (us)|fabric bench write-lat --transport udp --size 8 --iters 3000|t_typical_us"
  "fabric shm WRITE lat 8 B (us)|fabric bench write-lat --transport shm --size 8 --iters 3000|t_typical_us"
  "fabric shm READ lat 8 B (us)|fabric bench read-lat --transport shm --size 8 --iters 3000|t_typical_us"
  "fabric tcp WRITE lat 8 B (us)|fabric bench write-lat --transport tcp --size 8 --iters 3000|t_typical_us"
  "lazy tcp 4 KiB fault (us)|lazy bench --transport tcp --faults 1000 --trials 5|p50_us"
  "lazy udp 4 KiB fault (us)|lazy bench --transport udp --faults 1000 --trials 5|p50_us"
  "lazy shm 4 KiB fault, mapped (us)|lazy bench --transport shm --faults 1000 --trials 5|p50_us"
  "lazy shm 4 KiB fault, READs (us)|lazy bench --transport shm --shm-read --faults 1000 --trials 5|p50_us"
)

for round in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name args field <<< "$c"
    # Alternate which build goes first, so neither always runs on a warmer machine.
    if (( round % 2 )); then order=("A" "B"); else order=("B" "A"); fi
    for which in "${order[@]}"; do
      bin=$A; [ "$which" = B ] && bin=$B
      # shellcheck disable=SC2086
      v=$("$bin" $args --json 2>/dev/null | python3 -c "import sys,json; print(json.load(sys.stdin)['$field'])")
      echo "{\"round\":$round,\"build\":\"$which\",\"case\":\"$name\",\"value\":$v}" >> "$res"
    done
  done
  echo "round $round of $ROUNDS done" >&2
done

python3 - "$res" "$A" "$B" "$ROUNDS" > "$out/ab.md" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
v = collections.defaultdict(list)
for r in rows:
    v[(r["case"], r["build"])].append(r["value"])
cases = list(dict.fromkeys(r["case"] for r in rows))
print(f"A = `{sys.argv[2]}`, B = `{sys.argv[3]}`, {sys.argv[4]} interleaved rounds, medians.\n")
print("| what | A | B | B/A | A min..max | B min..max |")
print("| --- | --- | --- | --- | --- | --- |")
for c in cases:
    a, b = v[(c, "A")], v[(c, "B")]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {c} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | {min(a):.2f}..{max(a):.2f} | {min(b):.2f}..{max(b):.2f} |")
PY
cat "$out/ab.md"
echo "wrote $out/ab.md and $res" >&2
