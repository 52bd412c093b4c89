#!/usr/bin/env bash
# The H200 comparison of 2026-11-27 (docs/bench/gpu.md): this build and an earlier one
# (base.tgz: a packed remora binary) side by side on one GPU host, results tarred into $OUT.
# Run from a copy of the project holding .portable/ (../shared/tools/portable-bundle.sh), with
# base.tgz (the earlier binary) and q.npy / t.npy (u8 descriptors) beside it:
#   bash .portable/run.sh 'bash bench/device/gpu_host.sh'
set -u
. "$(dirname "$0")/lib.sh"
[ -n "$BASE" ] || { echo "base.tgz (the earlier binary) is missing beside .portable" >&2; exit 1; }
J="bench jungfrau --modules ${MODULES:-8} --json"; F=${FRAMES:-100}
M="bench match --query $here/q.npy --train $here/t.npy --no-peers --repeat 5 --json"
run new_gpu 60 remora $J --engine gpu --frames $F --frames-in-flight 3
run base_gpu 60 $BASE $J --engine gpu --frames $F
run new_match 60 remora $M --engine all
run base_match 40 $BASE $M --engine gpu
run new_acq_shm 60 remora bench acquisition --transport shm --frames ${AFRAMES:-300} --json
run new_acq_udp 60 remora bench acquisition --transport udp --frames ${AFRAMES:-300} --json
run base_acq_shm 45 $BASE bench acquisition --transport shm --frames ${AFRAMES:-300} --json
run new_cpu16 40 remora $J --engine cpu-simd --frames $F
run new_cpu1 60 remora $J --engine cpu-simd --threads 1 --frames ${F1:-10}
run new_gpu_fif8 40 remora $J --engine gpu --frames $F --frames-in-flight 8
finish
