#!/usr/bin/env bash
# Single gets only, two remora builds alternating round by round (memcaslap, 32 connections,
# 16-byte keys, 32-byte values): throughput and the server's CPU time per get, from
# /proc/PID/stat. For a change to the get path, where bench/kv.sh's mixed run is too noisy.
#   bash bench/kv-get-ab.sh A_REMORA B_REMORA [ROUNDS] [SECS]
set -euo pipefail
A=${1:?usage: bash bench/kv-get-ab.sh A_REMORA B_REMORA [ROUNDS] [SECS]}
B=${2:?usage: bash bench/kv-get-ab.sh A_REMORA B_REMORA [ROUNDS] [SECS]}
ROUNDS=${3:-6}
SECS=${4:-4}
command -v memcaslap >/dev/null || { echo "memcaslap not installed (libmemcached-tools)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'key\n16 16 1\nvalue\n32 32 1\ncmd\n0 0.0\n1 1.0\n' > "$tmp/get.cfg"
USER_FLAG=(); [ "$(id -u)" = 0 ] && USER_FLAG=(-u root)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for r in $(seq "$ROUNDS"); do
  for which in A B; do
    bin=$A; [ "$which" = B ] && bin=$B
    port=$(free_port)
    "$bin" kv serve -p "$port" -U 0 -l 127.0.0.1 -t 2 -m 256 "${USER_FLAG[@]}" & pid=$!
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
    c0=$(ticks "$pid")
    tps=$(timeout $((SECS + 20)) memcaslap -s 127.0.0.1:"$port" -T 1 -c 32 -t "${SECS}s" -F "$tmp/get.cfg" 2>&1 \
      | awk '/TPS:/ {for (i=1;i<=NF;i++) if ($i=="TPS:") t=$(i+1)} END {print t}')
    c1=$(ticks "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$which $tps $(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$tps" -v s="$SECS" 'BEGIN {printf "%.2f", t / hz * 1e6 / (n * s)}')" | tee -a "$tmp/all"
  done
done
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for w in A B; do
  echo "$w: median $(awk -v w=$w '$1==w {print $2}' "$tmp/all" | med) gets/s, $(awk -v w=$w '$1==w {print $3}' "$tmp/all" | med) us of server CPU per get"
done
