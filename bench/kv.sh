#!/usr/bin/env bash
# Runs memcached 1.6 and `remora kv serve` with the same threads and memory, one after the other,
# under the same load generators, and writes ratios to bench/out/kv.md (bench/out is not
# tracked: docs/bench/kv.md keeps chosen runs, updated by hand with the command, date and machine).
#
#   bash bench/kv.sh            # defaults: 2 server threads, 256 MB, 4 s per run, 3 rounds
#   THREADS=4 SECS=10 ROUNDS=5 bash bench/kv.sh
#   IO=epoll bash bench/kv.sh   # only one of remora's worker I/O loops (default: both,
#                               # "epoll uring", alternating with memcached in one run)
#   STORAGE=arena bash bench/kv.sh  # only one of remora's item stores (default: "arena heap",
#                               # the slab arena and the heap store it replaced, same run)
#   BEFORE=/tmp/before/target/release/remora bash bench/kv.sh
#                               # also another remora build ("before-IO-STORAGE" columns): the
#                               # same-run A/B a change to the request path needs
#
# Load generators: memcaslap (libmemcached-tools) and kvload (crates/kv/examples/kvload.rs,
# one request in flight per connection, latency percentiles). Runs alternate between the two
# servers and each figure is the median of ROUNDS runs, which damps noise from other jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
MEM=${MEM:-256}
SECS=${SECS:-4}
ROUNDS=${ROUNDS:-3}
IO=${IO:-epoll uring}
STORAGE=${STORAGE:-arena heap}
OUT=${OUT:-bench/out/kv.md}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

command -v memcached >/dev/null || { echo "bench/kv.sh: memcached not installed" >&2; exit 1; }
command -v memcaslap >/dev/null || { echo "bench/kv.sh: memcaslap not installed (libmemcached-tools)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
cargo build -q --release -p remora-cli
cargo build -q --release -p remora-kv --example kvload
REMORA="$CARGO_TARGET_DIR/release/remora"
KVLOAD="$CARGO_TARGET_DIR/release/examples/kvload"
USER_FLAG=()
[ "$(id -u)" = 0 ] && USER_FLAG=(-u root)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/get.cfg" <<CFG
key
16 16 1
value
32 32 1
cmd
0 0.0
1 1.0
CFG
cat > "$tmp/mix.cfg" <<CFG
key
16 16 1
value
32 32 1
cmd
0 0.1
1 0.9
CFG

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run SERVER WORKLOAD -> prints "ops/s keys/s p50 p99 p999" (latency fields "-" for memcaslap)
run() {
  local server=$1 wl=$2 port pid
  port=$(free_port)
  if [ "$server" = memcached ]; then
    memcached -p "$port" -U 0 -l 127.0.0.1 -t "$THREADS" -m "$MEM" "${USER_FLAG[@]}" & pid=$!
  else
    # remora-IO-STORAGE, or before-IO-STORAGE with the $BEFORE build
    local bin=$REMORA; [ "${server%%-*}" = before ] && bin=$BEFORE
    local io=${server#*-}; local st=${io#*-}; io=${io%%-*}
    "$bin" kv serve -p "$port" -U 0 -l 127.0.0.1 -t "$THREADS" -m "$MEM" -o io="$io",storage="$st" "${USER_FLAG[@]}" & pid=$!
  fi
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
  local c0 c1 line
  c0=$(cpu_ticks "$pid")
  line=$(case $wl in
    slap-get) timeout $((SECS + 20)) memcaslap -s 127.0.0.1:"$port" -T 1 -c 32 -t "${SECS}s" -F "$tmp/get.cfg" 2>&1 \
                | awk '/TPS:/ {for (i=1;i<=NF;i++) if ($i=="TPS:") t=$(i+1)} END {print t, t, "-", "-", "-"}' ;;
    # memcaslap counts each key of a multiget as one op: keys/s is its TPS.
    slap-multiget48) timeout $((SECS + 20)) memcaslap -s 127.0.0.1:"$port" -T 1 -c 32 -t "${SECS}s" -F "$tmp/get.cfg" -d 48 2>&1 \
                | awk '/TPS:/ {for (i=1;i<=NF;i++) if ($i=="TPS:") t=$(i+1)} END {print t/48, t, "-", "-", "-"}' ;;
    slap-mix) timeout $((SECS + 20)) memcaslap -s 127.0.0.1:"$port" -T 1 -c 32 -t "${SECS}s" -F "$tmp/mix.cfg" 2>&1 \
                | awk '/TPS:/ {for (i=1;i<=NF;i++) if ($i=="TPS:") t=$(i+1)} END {print t, t, "-", "-", "-"}' ;;
    load-get) timeout $((SECS + 20)) "$KVLOAD" 127.0.0.1:"$port" get --secs "$SECS" ;;
    load-multiget48) timeout $((SECS + 20)) "$KVLOAD" 127.0.0.1:"$port" multiget48 --secs "$SECS" ;;
    load-mix) timeout $((SECS + 20)) "$KVLOAD" 127.0.0.1:"$port" mix --secs "$SECS" ;;
    load-latency) timeout $((SECS + 20)) "$KVLOAD" 127.0.0.1:"$port" mix --secs "$SECS" --conns 8 --rate 20000 ;;
  esac)
  c1=$(cpu_ticks "$pid")
  # Sixth field: server CPU time (user + system) per request, in microseconds.
  echo "$line" | awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v secs="$SECS" \
    '{ops=$1*secs; printf "%s %s %s %s %s %.2f\n", $1, $2, $3, $4, $5, (ops>0 ? t/hz*1e6/ops : 0)}'
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

workloads=(slap-get slap-multiget48 slap-mix load-get load-multiget48 load-mix load-latency)
servers=(memcached)
for io in $IO; do for st in $STORAGE; do servers+=("remora-$io-$st"); done; done
if [ -n "${BEFORE:-}" ]; then
  [ -x "$BEFORE" ] || { echo "bench/kv.sh: BEFORE=$BEFORE is not an executable" >&2; exit 1; }
  for io in $IO; do for st in $STORAGE; do servers+=("before-$io-$st"); done; done
fi
for wl in "${workloads[@]}"; do
  for r in $(seq "$ROUNDS"); do
    for server in "${servers[@]}"; do
      line=$(run "$server" "$wl")
      echo "$wl round $r $server: $line" >&2
      echo "$line" >> "$tmp/$wl.$server"
    done
  done
done

col() { awk -v c="$2" '{print $c}' "$1" | median; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{b/a:.2f}x' if a>0 else '-')" "$1" "$2"; }

rems=("${servers[@]:1}")
# A markdown header: "| workload | memcached | remora-uring | ratio | ..." and its rule.
header() {
  local h="| $1 | memcached" r="| --- | ---:"
  for s in "${rems[@]}"; do h+=" | $s | $2"; r+=" | ---: | ---:"; done
  echo "$h |"; echo "$r |"
}
{
  echo "# remora kv vs memcached: measured results"
  echo
  echo "Produced by \`bash bench/kv.sh\` (THREADS=$THREADS MEM=${MEM}MB SECS=$SECS ROUNDS=$ROUNDS IO=\"$IO\") on $(date -u +%Y-%m-%d)."
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r)."
  echo "memcached: $(memcached -V). Both servers: \`-t $THREADS -m $MEM -U 0 -l 127.0.0.1\` (remora-IO-STORAGE also \`-o io=IO,storage=STORAGE\`)."
  echo "Load generator and server share the same cores, so figures are ratios from one run, each the"
  echo "median of $ROUNDS runs alternating between the servers."
  echo
  header workload ratio
  for wl in "${workloads[@]}"; do
    case $wl in
      slap-get) name="memcaslap single get, 32 conns (ops/s)"; c=1 ;;
      slap-multiget48) name="memcaslap 48-key multiget, 32 conns (keys/s)"; c=2 ;;
      slap-mix) name="memcaslap 90/10 get/set, 32-byte values (ops/s)"; c=1 ;;
      load-get) name="kvload single get, 32 conns (ops/s)"; c=1 ;;
      load-multiget48) name="kvload 48-key multiget, 32 conns (keys/s)"; c=2 ;;
      load-mix) name="kvload 90/10 get/set, 32-byte values (ops/s)"; c=1 ;;
      load-latency) name="kvload 90/10 at ~20K req/s, 8 conns (ops/s)"; c=1 ;;
    esac
    a=$(col "$tmp/$wl.memcached" $c)
    line="| $name | $a"
    for s in "${rems[@]}"; do b=$(col "$tmp/$wl.$s" $c); line+=" | $b | $(ratio "$a" "$b")"; done
    echo "$line |"
  done
  echo
  echo "Server CPU time per request (user + system, microseconds, median of runs): less is better;"
  echo "ratio = memcached / remora. This is steadier than throughput when other jobs share the cores."
  echo
  header workload ratio
  for wl in "${workloads[@]}"; do
    a=$(col "$tmp/$wl.memcached" 6)
    line="| $wl | $a"
    for s in "${rems[@]}"; do b=$(col "$tmp/$wl.$s" 6); line+=" | $b | $(ratio "$b" "$a")"; done
    echo "$line |"
  done
  echo
  echo "Latency (kvload, microseconds, median of runs; lower is better): p50 / p99 / p99.9"
  echo
  h="| workload | memcached"; r="| --- | ---"
  for s in "${rems[@]}"; do h+=" | $s"; r+=" | ---"; done
  echo "$h |"; echo "$r |"
  for wl in load-get load-multiget48 load-mix load-latency; do
    line="| $wl | $(col "$tmp/$wl.memcached" 3) / $(col "$tmp/$wl.memcached" 4) / $(col "$tmp/$wl.memcached" 5)"
    for s in "${rems[@]}"; do
      line+=" | $(col "$tmp/$wl.$s" 3) / $(col "$tmp/$wl.$s" 4) / $(col "$tmp/$wl.$s" 5)"
    done
    echo "$line |"
  done
} > "$OUT.new"
mv "$OUT.new" "$OUT"
cat "$OUT"
echo "bench/kv.sh: results written to $OUT (copy what you keep into docs/bench/kv.md by hand)" >&2
