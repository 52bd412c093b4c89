#!/usr/bin/env bash
# OPERA's remote-page-fault micro-benchmark for `remora lazy`: 50 trials x 1000 faults, 4 KB and
# 64 KB units, per transport and resolution mode, on loopback and between two network namespaces
# joined by a veth pair; plus sequential scans with prefetch against a local memcpy.
# Usage: bash bench/lazy.sh [TRIALS] [FAULTS]   (prints a markdown table; JSON lines in $OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-50}
FAULTS=${2:-1000}
OUT=${OUT:-/tmp/remora-lazy-bench.jsonl}
: > "$OUT"
cargo build --release -q -p remora-cli
B=${CARGO_TARGET_DIR:-target}/release/remora
TRANSPORTS=${TRANSPORTS:-"local tcp"}

run() { # label, args...
  local label=$1; shift
  local j
  j=$("$B" lazy bench --json --trials "$TRIALS" --faults "$FAULTS" "$@")
  echo "{\"label\":\"$label\",${j#\{}" >> "$OUT"
}

echo "lazy bench: $(date -u +%FT%TZ) $(nproc) cores, $(uname -r), trials=$TRIALS faults=$FAULTS" >&2
for t in $TRANSPORTS; do
  for p in 4096 65536; do
    for m in thread sigbus; do
      run loopback --transport "$t" --page-size "$p" --mode "$m" --pattern random
    done
  done
done
# Sequential scans: prefetch off / next:16 / adaptive, 4 KB units.
for t in $TRANSPORTS; do
  for pf in none next:16 adaptive; do
    run scan --transport "$t" --page-size 4096 --mode sigbus --pattern seq --prefetch "$pf"
  done
done

# Two network namespaces joined by a veth pair (root only).
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
  NS1=rlz-srv-$$; NS2=rlz-cli-$$
  cleanup() {
    [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null || true
    [ -n "${SRV2:-}" ] && kill "$SRV2" 2>/dev/null || true
    ip netns del "$NS1" 2>/dev/null || true
    ip netns del "$NS2" 2>/dev/null || true
  }
  trap cleanup EXIT
  ip netns add "$NS1"; ip netns add "$NS2"
  ip link add rlz0-$$ type veth peer name rlz1-$$ 2>/dev/null || ip link add rlz0 type veth peer name rlz1
  V0=$(ip -o link | grep -o "rlz0[^:@]*" | head -1); V1=$(ip -o link | grep -o "rlz1[^:@]*" | head -1)
  ip link set "$V0" netns "$NS1"; ip link set "$V1" netns "$NS2"
  ip -n "$NS1" addr add 10.77.0.1/24 dev "$V0"; ip -n "$NS2" addr add 10.77.0.2/24 dev "$V1"
  ip -n "$NS1" link set "$V0" up; ip -n "$NS2" link set "$V1" up
  ip -n "$NS1" link set lo up; ip -n "$NS2" link set lo up
  ip netns exec "$NS1" "$B" lazy serve --synthetic $((FAULTS * 65536)) --listen 10.77.0.1:7911 > /tmp/rlz-srv-$$.out &
  SRV=$!
  ip netns exec "$NS1" "$B" lazy serve --synthetic $((FAULTS * 65536)) --listen 10.77.0.1:7912 \
    --transport udp > /tmp/rlz-srv2-$$.out &
  SRV2=$!
  for _ in $(seq 100); do grep -q listening /tmp/rlz-srv-$$.out 2>/dev/null && break; sleep 0.05; done
  for _ in $(seq 100); do grep -q listening /tmp/rlz-srv2-$$.out 2>/dev/null && break; sleep 0.05; done
  for t in tcp:7911 udp:7912; do
    for p in 4096 65536; do
      for m in thread sigbus; do
        j=$(ip netns exec "$NS2" "$B" lazy bench --json --trials "$TRIALS" --faults "$FAULTS" \
            --transport "${t%%:*}" --connect "10.77.0.1:${t##*:}" --page-size "$p" --mode "$m")
        echo "{\"label\":\"veth\",${j#\{}" >> "$OUT"
      done
    done
  done
else
  echo "lazy bench: not root: skipping the network-namespace runs" >&2
fi

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
opera = {4096: 42.8, 65536: 114.3}
tcp = {(r["label"], r["page_size"], r["mode"]): r["mean_us"] for r in rows if r["transport"] == "tcp" and r["pattern"] == "random"}
print("| path | transport | unit | mode | mean ± std (µs) | p50 | p99 | vs OPERA TCP | vs tcp (same path) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["label"] == "scan":
        continue
    t = tcp.get((r["label"], r["page_size"], r["mode"]))
    print(f'| {r["label"]} | {r["transport"]} | {r["page_size"]//1024} KB | {r["mode"]} | {r["mean_us"]:.1f} ± {r["std_us"]:.1f} | {r["p50_us"]:.1f} | {r["p99_us"]:.1f} | {r["mean_us"]/opera[r["page_size"]]:.2f}x | {r["mean_us"]/t:.2f}x |' if t else
          f'| {r["label"]} | {r["transport"]} | {r["page_size"]//1024} KB | {r["mode"]} | {r["mean_us"]:.1f} ± {r["std_us"]:.1f} | {r["p50_us"]:.1f} | {r["p99_us"]:.1f} | {r["mean_us"]/opera[r["page_size"]]:.2f}x | - |')
print()
print("| scan (4 KB units, sequential) | transport | prefetch | faults/trial | scan ms | local memcpy ms | scan / memcpy |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["label"] == "scan":
        print(f'| {r["faults"]} units | {r["transport"]} | {r["prefetch"]} | {r["faults_per_trial"]:.0f} | {r["scan_ms"]:.2f} | {r["memcpy_ms"]:.2f} | {r["scan_ms"]/r["memcpy_ms"]:.1f}x |')
k = [r["kernel_fault_us"] for r in rows]
print(f"\nkernel anonymous fault, same method: {sum(k)/len(k):.2f} µs")
PY
