#!/usr/bin/env bash
# Post-copy live migration of a populated `remora kv serve` (the target started with
# `--migrate-from`, serving at once while pages fault in and a push copies the rest) against
# stop-and-copy (every item dumped with multigets and reloaded into a fresh server), one run,
# same machine, the same client (one connection, 90/10 get/set, every value checked).
#
#   bash bench/kv-migrate.sh                          # 1,000,000 items of 1000 bytes (1 GB)
#   ITEMS=20000 VALUE_SIZE=500 bash bench/kv-migrate.sh
#
# Needs about 3x the items' bytes of free memory. Prints the JSON object and writes it to $OUT
# (bench/out/kv-migrate.json; bench/out is not tracked: docs/bench/kv.md is updated by hand);
# the servers' logs and the progress go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
ITEMS=${ITEMS:-1000000}
VALUE_SIZE=${VALUE_SIZE:-1000}
OUT=${OUT:-bench/out/kv-migrate.json}
mkdir -p "$(dirname "$OUT")"
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p remora-cli   # NO_BUILD=1: use the built binary
B=${CARGO_TARGET_DIR:-target}/release/remora

echo "kv migrate bench: $(date -u +%FT%TZ) $(nproc) cores, $(uname -r), items=$ITEMS value_size=$VALUE_SIZE, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$B" bench migrate --items "$ITEMS" --value-size "$VALUE_SIZE" --json | tee "$OUT"
echo "wrote $OUT (docs/bench/kv.md is updated from it by hand)" >&2
