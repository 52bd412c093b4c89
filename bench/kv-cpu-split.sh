#!/usr/bin/env bash
# Server CPU per single get, split into user and kernel time, for memcached and remora kv
# (epoll and io_uring loops), alternating in one run: where the time of a get goes, and how
# much of it no user-space change can remove (both servers make the same system calls per get).
#
#   bash bench/kv-cpu-split.sh            # 2 threads, 4 s per run, 3 rounds
#   SECS=6 ROUNDS=5 bash bench/kv-cpu-split.sh
#
# Load: memcaslap, 1 thread x 32 connections, single gets of 16-byte keys and 32-byte values
# (the bench/kv.sh workload). Figures: medians over the rounds of (utime or stime delta from
# /proc/PID/stat) / requests served (memcaslap's TPS x seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
SECS=${SECS:-4}
ROUNDS=${ROUNDS:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
command -v memcaslap >/dev/null || { echo "memcaslap not installed (libmemcached-tools)" >&2; exit 1; }
cargo build -q --release -p remora-cli
REMORA="$CARGO_TARGET_DIR/release/remora"
USER_FLAG=()
[ "$(id -u)" = 0 ] && USER_FLAG=(-u root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'key\n16 16 1\nvalue\n32 32 1\ncmd\n0 0.0\n1 1.0\n' > "$tmp/get.cfg"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
hz=$(getconf CLK_TCK)

# run SERVER -> "user_us sys_us" per request
run() {
  local server=$1 port pid u0 s0 u1 s1 tps
  port=$(free_port)
  case $server in
    memcached) memcached -p "$port" -U 0 -l 127.0.0.1 -t "$THREADS" -m 256 "${USER_FLAG[@]}" & pid=$! ;;
    remora-*) "$REMORA" kv serve -p "$port" -U 0 -l 127.0.0.1 -t "$THREADS" -m 256 -o io="${server#remora-}" "${USER_FLAG[@]}" & pid=$! ;;
  esac
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  tps=$(timeout $((SECS + 20)) memcaslap -s 127.0.0.1:"$port" -T 1 -c 32 -t "${SECS}s" -F "$tmp/get.cfg" 2>&1 \
        | awk '/TPS:/ {for (i=1;i<=NF;i++) if ($i=="TPS:") t=$(i+1)} END {print t}')
  read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$tps" -v secs="$SECS" \
    'BEGIN {r = n * secs; printf "%.3f %.3f %s\n", u / hz * 1e6 / r, s / hz * 1e6 / r, n}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
servers=(memcached remora-epoll remora-uring)
for r in $(seq "$ROUNDS"); do
  for s in "${servers[@]}"; do
    line=$(run "$s"); echo "round $r $s: user sys (us/req) ops/s = $line" >&2
    echo "$line" >> "$tmp/$s"
  done
done
echo "| server | user µs/get | kernel µs/get | total µs/get | vs memcached | ops/s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
mt=$(awk '{print $1 + $2}' "$tmp/memcached" | median)
for s in "${servers[@]}"; do
  u=$(awk '{print $1}' "$tmp/$s" | median); k=$(awk '{print $2}' "$tmp/$s" | median)
  t=$(awk '{print $1 + $2}' "$tmp/$s" | median); o=$(awk '{print $3}' "$tmp/$s" | median)
  python3 -c "import sys; u,k,t,m=map(float,sys.argv[1:5]); print(f'| $s | {u:.2f} | {k:.2f} | {t:.2f} | {t/m:.2f}x | $o |')" "$u" "$k" "$t" "$mt"
done
echo
echo "0.8x memcached's total: $(python3 -c "print(f'{0.8*float($mt):.2f}')") µs per get."
