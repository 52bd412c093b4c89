#!/usr/bin/env bash
# remora fabric beside its peers, in one run on this machine: memcpy (the same-host ceiling), a
# plain sendto/recvfrom UDP loop, ucx_perftest over tcp and shared memory, and remora's
# udp/shm/tcp transports. Writes bench/out/fabric.md (bench/out is not tracked: copy what holds
# into docs/bench/fabric.md by hand).
# Usage: bash bench/fabric.sh   (after `make build`; needs gcc, python3, ucx-utils)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${REMORA:-${CARGO_TARGET_DIR:-target}/release/remora}
[ -x "$R" ] || { echo "build first: make build (looked for $R)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "needs ucx_perftest (apt-get install ucx-utils)" >&2; exit 1; }
out=bench/out; mkdir -p "$out"; res=$out/fabric.jsonl; : > "$res"
gcc -O2 -o "$out/udp_loop" bench/udp_loop.c
gcc -O2 -o "$out/memcpy_bw" bench/memcpy_bw.c
ITERS=${ITERS:-20000}
emit() { echo "{\"name\":\"$1\",\"result\":$2}" >> "$res"; echo "$1: $2"; }

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# ucx_perftest TEST SIZE TLS ITERS -> JSON {"mbps":..,"lat_us":..}
ucx() {
  local test=$1 size=$2 tls=$3 n=$4 port; port=$(free_port)
  UCX_TLS=$tls UCX_NET_DEVICES=lo timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  local line
  line=$(UCX_TLS=$tls UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$n" 2>/dev/null | grep '^Final:' || true)
  wait "$srv" 2>/dev/null || true
  # Final: iters  typical  avg  overall  bw-avg  bw-overall  rate-avg  rate-overall
  python3 - "$line" <<'PY'
import sys, json
f = sys.argv[1].split()
if len(f) < 9: print(json.dumps({"error": "no result"})); sys.exit()
print(json.dumps({"lat_typical_us": float(f[2]), "lat_avg_us": float(f[3]), "mbps": float(f[6])}))
PY
}

echo "== ceilings and plain sockets"
emit memcpy_1m "$("$out/memcpy_bw" 1048576)"
emit memcpy_64k "$("$out/memcpy_bw" 65536)"
emit memcpy_1m_same "$("$out/memcpy_bw" 1048576 1048576)"
emit udp_loop_4k "$("$out/udp_loop" 4096 300000)"

echo "== bandwidth"
for s in 65536 1048576; do
  emit "remora_udp_write_bw_$s" "$("$R" fabric bench write-bw --transport udp --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "remora_udp_poll_write_bw_$s" "$("$R" fabric bench write-bw --transport udp --progress poll --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "remora_udp_uc_write_bw_$s" "$("$R" fabric bench write-bw --transport udp --qp uc --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "remora_tcp_write_bw_$s" "$("$R" fabric bench write-bw --transport tcp --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "remora_tcp_poll_write_bw_$s" "$("$R" fabric bench write-bw --transport tcp --progress poll --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "remora_shm_write_bw_$s" "$("$R" fabric bench write-bw --transport shm --size $s --iters $((ITERS * 65536 / s + 200)) --json)"
  emit "ucx_tcp_put_bw_$s" "$(ucx ucp_put_bw $s tcp $((ITERS * 65536 / s + 200)))"
  emit "ucx_shm_put_bw_$s" "$(ucx ucp_put_bw $s sm $((ITERS * 65536 / s + 200)))"
done
emit remora_udp_send_bw_65536 "$("$R" fabric bench send-bw --transport udp --size 65536 --iters "$ITERS" --json)"

echo "== latency (8 bytes)"
for t in udp shm tcp; do
  emit "remora_${t}_write_lat" "$("$R" fabric bench write-lat --transport $t --size 8 --iters 5000 --json)"
  emit "remora_${t}_read_lat" "$("$R" fabric bench read-lat --transport $t --size 8 --iters 5000 --json)"
done
# Progress in the caller's thread: sleeping, and busy polling as ucx does.
for t in udp shm tcp; do
  for p in poll spin; do
    flags=(--progress poll); [ $p = spin ] && flags+=(--spin)
    emit "remora_${t}_${p}_write_lat" "$("$R" fabric bench write-lat --transport $t "${flags[@]}" --size 8 --iters 5000 --json)"
    emit "remora_${t}_${p}_read_lat" "$("$R" fabric bench read-lat --transport $t "${flags[@]}" --size 8 --iters 5000 --json)"
  done
done
# tcp busy polling with lazy ACKs (a lone ACK rides on the caller's next request).
emit remora_tcp_lazy_write_lat "$("$R" fabric bench write-lat --transport tcp --progress poll --spin --lazy-ack --size 8 --iters 5000 --json)"
emit remora_tcp_lazy_read_lat "$("$R" fabric bench read-lat --transport tcp --progress poll --spin --lazy-ack --size 8 --iters 5000 --json)"
emit remora_shm_spin_write_bw_65536 "$("$R" fabric bench write-bw --transport shm --progress poll --spin --size 65536 --iters "$ITERS" --json)"
emit ucx_tcp_put_lat "$(ucx ucp_put_lat 8 tcp 5000)"
emit ucx_shm_put_lat "$(ucx ucp_put_lat 8 sm 5000)"

python3 bench/fabric_report.py "$res" > "$out/fabric.md"
echo "wrote $out/fabric.md (docs/bench/fabric.md is updated from it by hand)"
