#!/usr/bin/env bash
# What the next lent GPU host should measure for issues 28 and 30 (docs/bench/gpu.md,
# docs/bench/daq.md, docs/bench/part.md): this build and an earlier one (base.tgz, a packed
# remora binary) side by side, results tarred into $OUT as they come.
#   - the CPU chain and its stages on 1, 2, 4, 8 and 16 threads (where the 16-core scaling stops);
#   - the GPU chain with 3 frames in flight (the CSR pack's vec4 stores, 742dc99);
#   - PART at 4 MiB, five runs each (the page-in wave with cores to spare).
# Run from a copy of the project holding .portable/ (../shared/tools/portable-bundle.sh) and
# base.tgz beside it:  bash .portable/run.sh 'bash bench/device/scaling_host.sh'
# THREADS, FRAMES, PART_RUNS and REMORA_GPU override the defaults (e.g. a dry run on a laptop:
# THREADS="1 2" FRAMES=4 PART_RUNS=1 REMORA_GPU=any).
set -u
. "$(dirname "$0")/lib.sh"
J="bench jungfrau --modules ${MODULES:-8} --json"; F=${FRAMES:-60}
for t in ${THREADS:-1 2 4 8 16}; do
  run "new_cpu_t$t" 90 remora $J --engine cpu-simd --threads "$t" --frames "$F"
  [ -n "$BASE" ] && run "base_cpu_t$t" 90 "$BASE" $J --engine cpu-simd --threads "$t" --frames "$F"
done
run new_gpu 60 remora $J --engine gpu --frames "$F" --frames-in-flight 3
[ -n "$BASE" ] && run base_gpu 60 "$BASE" $J --engine gpu --frames "$F" --frames-in-flight 3
for r in $(seq 1 "${PART_RUNS:-5}"); do
  run "new_part_$r" 90 remora bench part --sizes 4M --iters 20 --hol-seconds 0 --json
done
finish
