#!/usr/bin/env bash
# OPERA's remote-page-fault micro-benchmark for `remora lazy`: 50 trials x 1000 faults, 4 KB and
# 64 KB units, per transport and resolution mode, on loopback and between two network namespaces
# joined by a veth pair; plus sequential scans with prefetch against a local memcpy.
# Usage: bash bench/lazy.sh [TRIALS] [FAULTS]
# Prints markdown tables and writes them to bench/out/lazy.md, JSON lines to $OUT
# (bench/out/lazy.jsonl); bench/out is not tracked: docs/bench/lazy.md is updated by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-50}
FAULTS=${2:-1000}
mkdir -p bench/out
OUT=${OUT:-bench/out/lazy.jsonl}
REPORT=bench/out/lazy.md
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
# shm runs twice: the client mapping the server's source (default), and RC READs (--shm-read).
variants() { if [ "$1" = shm ]; then echo "shm shm-read"; else echo "$1"; fi; }
targs() { if [ "$1" = shm-read ]; then echo "--transport shm --shm-read"; else echo "--transport $1"; fi; }
for t0 in $TRANSPORTS; do
  for t in $(variants "$t0"); do
    for p in 4096 65536; do
      for m in thread sigbus; do
        # shellcheck disable=SC2046
        run loopback $(targs "$t") --page-size "$p" --mode "$m" --pattern random
      done
    done
  done
done
# Sequential scans: prefetch off / next:16 / adaptive up to 32 and 256 units, 4 KB units.
for t0 in $TRANSPORTS; do
  for t in $(variants "$t0"); do
    for pf in none next:16 adaptive:32 adaptive:256; do
      # shellcheck disable=SC2046
      run scan $(targs "$t") --page-size 4096 --mode sigbus --pattern seq --prefetch "$pf"
    done
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
  # No shm run here: its rendezvous is a unix socket in the server's network namespace, so shm
  # refuses peers in another one by design (docs/security.md).
  for f in srv srv2; do
    for _ in $(seq 100); do grep -q listening "/tmp/rlz-$f-$$.out" 2>/dev/null && break; sleep 0.05; done
  done
  for t in tcp:7911 udp:7912; do
    for p in 4096 65536; do
      for m in thread sigbus; do
        j=$(ip netns exec "$NS2" "$B" lazy bench --json --trials "$TRIALS" --faults "$FAULTS" \
            --transport "${t%%:*}" --connect "10.77.0.1:${t##*:}" --page-size "$p" --mode "$m")
        echo "{\"label\":\"veth\",${j#\{}" >> "$OUT"
      done
    done
  done
  # The servers go now: the tcp one busy-polls, which would load the runs below.
  cleanup; trap - EXIT
else
  echo "lazy bench: not root: skipping the network-namespace runs" >&2
fi

python3 - "$OUT" <<'PY' | tee "$REPORT"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["transport"] == "shm":
        r["transport"] = "shm (mapped)" if r.get("shm_path") == "mapped" else "shm (READ)"
opera = {4096: 42.8, 65536: 114.3}
tcp = {(r["label"], r["page_size"], r["mode"]): r["mean_us"] for r in rows if r["transport"] == "tcp" and r["pattern"] == "random"}
print("| path | transport | unit | mode | mean ± std (µs) | p50 | p99 | vs OPERA TCP | vs tcp (same path) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["label"] == "scan":
        continue
    t = tcp.get((r["label"], r["page_size"], r["mode"]))
    vs = f'{r["mean_us"]/t:.2f}x' if t else "-"
    print(f'| {r["label"]} | {r["transport"]} | {r["page_size"]//1024} KB | {r["mode"]} | {r["mean_us"]:.1f} ± {r["std_us"]:.1f} | {r["p50_us"]:.1f} | {r["p99_us"]:.1f} | {r["mean_us"]/opera[r["page_size"]]:.2f}x | {vs} |')
print()
print("| scan (4 KB units, sequential) | transport | prefetch | faults/trial | scan ms | bare UFFDIO_COPY ms | memcpy ms (touched / fresh pages) | scan / memcpy touched | scan / memcpy fresh |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["label"] == "scan":
        print(f'| {r["faults"]} units | {r["transport"]} | {r["prefetch"]} | {r["faults_per_trial"]:.0f} | {r["scan_ms"]:.2f} | {r["bare_install_ms"]:.2f} | {r["memcpy_ms"]:.2f} / {r["memcpy_fresh_ms"]:.2f} | {r["scan_ms"]/r["memcpy_ms"]:.1f}x | {r["scan_ms"]/r["memcpy_fresh_ms"]:.2f}x |')
def avg(key, label=None):
    v = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])
         and (label is None or r["label"] == label)]
    return sum(v) / len(v) if v else float("nan")
print(f"\nkernel anonymous fault, same method: {avg('kernel_fault_us'):.2f} µs; "
      f"bare SIGBUS handler + UFFDIO_COPY, same method: {avg('bare_sigbus_fault_us'):.2f} µs; "
      f"bare UFFDIO_COPY of {rows[0]['faults']} x 4 KB in 2 MB calls: {avg('bare_install_ms', 'scan'):.2f} ms; "
      f"memcpy of the same bytes: {avg('memcpy_ms', 'scan'):.2f} ms into touched memory, {avg('memcpy_fresh_ms', 'scan'):.2f} ms into fresh pages")
PY

# The kernel's mechanisms with no remora code around them (what the local floor is made of, and
# the alternatives to SIGBUS + UFFDIO_COPY), same trials, 1000 random 4 KB first touches each.
FLOOR=$(mktemp -d)
gcc -O2 -o "$FLOOR/uffd_floor" bench/uffd_floor.c -lm -lpthread
{
echo
echo "| bare mechanism (bench/uffd_floor.c, $TRIALS trials x 1000 random 4 KB faults) | mean ± std (µs) |"
echo "| --- | --- |"
for m in anon sigbus-copy sigbus-zero sigbus-move thread-block thread-spin; do
  if j=$("$FLOOR/uffd_floor" "$m" "$TRIALS" 2>&1); then
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %.2f ± %.2f |" % (r["mode"], r["mean_us"], r["std_us"]))' "$j"
  else
    echo "| $m | failed: $j |"
  fi
done
} | tee -a "$REPORT"
rm -rf "$FLOOR"
echo "wrote $REPORT and $OUT (docs/bench/lazy.md is updated from them by hand)" >&2
