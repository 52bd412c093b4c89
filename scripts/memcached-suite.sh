#!/usr/bin/env bash
# memcached 1.6.18's own test suite (t/*.t from Debian bookworm's source package) against a
# server that stands in for the `memcached-debug` binary the suite starts: `remora kv serve`
# (default) or Debian's /usr/bin/memcached (`--reference`), each test file under a timeout.
# Prints one line per file (ok / FAIL / TIMEOUT) and a summary; writes the per-file TAP output
# under $WORK/out-<server>/.
#
# Usage: bash scripts/memcached-suite.sh [--reference] [--jobs N] [--check] [FILE.t ...]
#   --check: exit 1 when a file does not pass, after printing the end of its log
#   (`make test` runs the files of scripts/memcached-suite.pass this way)
#   REMORA=path/to/remora (default: $CARGO_TARGET_DIR/release/remora or target/release/remora)
#   WORK=dir for the unpacked source (default: /var/cache/remora/memcached-suite)
# Needs root for the first run (adds a deb-src entry and runs apt-get source), perl and prove.
set -euo pipefail
cd "$(dirname "$0")/.."
server=remora
jobs=2
check=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reference) server=memcached ;;
    --jobs) jobs=$2; shift ;;
    --check) check=1 ;;
    *.t) files+=("$1") ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
WORK=${WORK:-/var/cache/remora/memcached-suite}
VERSION=1.6.18
src=$WORK/memcached-$VERSION
if [ ! -d "$src/t" ]; then
  mkdir -p "$WORK"
  if ! ls "$WORK"/memcached_"$VERSION".orig.tar.* >/dev/null 2>&1; then
    list=/etc/apt/sources.list.d/remora-deb-src.sources
    if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
      printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$list"
      apt-get update -q >/dev/null
    fi
    (cd "$WORK" && apt-get source -q --download-only memcached="$VERSION"-1 >/dev/null 2>&1 || apt-get source -q --download-only memcached >/dev/null)
  fi
  tar -C "$WORK" -xf "$WORK"/memcached_"$VERSION".orig.tar.*
fi
# The suite runs `$builddir/timedrun 600 $builddir/memcached-debug ARGS` (builddir = the source
# tree) and asks `memcached-debug -h` which features to test.
[ -x "$src/timedrun" ] || gcc -O2 -o "$src/timedrun" "$src/timedrun.c"
if [ "$server" = remora ]; then
  R=${REMORA:-${CARGO_TARGET_DIR:-target}/release/remora}
  [ -x "$R" ] || { echo "build first: make build (looked for $R)" >&2; exit 1; }
  exe="$(readlink -f "$R") kv serve"
else
  command -v memcached >/dev/null || { echo "needs Debian's memcached (apt-get install memcached)" >&2; exit 1; }
  exe=/usr/bin/memcached
fi
# The suite always passes `-o relaxed_privileges`, which only memcached's debug build knows:
# the stand-in drops it, for both servers alike.
cat > "$src/memcached-debug" <<EOF
#!/bin/bash
args=()
while [ \$# -gt 0 ]; do
  if [ "\$1" = -o ] && [ "\${2:-}" = relaxed_privileges ]; then shift 2; continue; fi
  args+=("\$1"); shift
done
exec $exe "\${args[@]}"
EOF
chmod +x "$src/memcached-debug"
out=$WORK/out-$server
rm -rf "$out"; mkdir -p "$out"
cd "$src"
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(ls t/*.t | xargs -n1 basename)
run_one() {
  local f=$1 out=$2
  # setsid + a timeout per file: a server a test started must not keep the harness waiting.
  if timeout -k 5 120 setsid prove -v "t/$f" < /dev/null > "$out/$f.log" 2>&1; then
    echo "ok      $f"
  elif [ $? -ge 124 ]; then
    echo "TIMEOUT $f"
  else
    echo "FAIL    $f"
  fi
}
export -f run_one
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$out" | sort -k2 | tee "$out/summary.txt"
echo "$server: $(grep -c '^ok' "$out/summary.txt") ok, $(grep -c '^FAIL' "$out/summary.txt") failed, $(grep -c '^TIMEOUT' "$out/summary.txt") timed out of ${#files[@]} files (logs in $out)"
if [ "$check" = 1 ] && grep -qv '^ok' "$out/summary.txt"; then
  grep -v '^ok' "$out/summary.txt" | while read -r _ f; do
    echo "--- $f (last lines of $out/$f.log)"
    tail -n 15 "$out/$f.log"
  done
  exit 1
fi
