#!/usr/bin/env bash
# `remora match` against OpenCV BFMatcher knnMatch(k=2) (exact), OpenCV FLANN (KD-tree, 4 trees,
# 32 checks; approximate) and FAISS IndexFlatL2 (exact), on real SIFT descriptors computed by
# OpenCV from the photographs Debian's opencv-doc ships, from a few thousand to ~50k descriptors
# per image, all on the same threads, ratio 0.6 (MicMac's).
# Usage: bash bench/match.sh [THREADS]     (default 2)
# Prints a markdown table and writes it to bench/out/match.md, JSON lines to $OUT
# (bench/out/match.jsonl); bench/out is not tracked: docs/bench/match.md is updated by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
mkdir -p bench/out
OUT=${OUT:-bench/out/match.jsonl}
REPORT=bench/out/match.md
W=bench/out/match-sift
: > "$OUT"

DATA=/usr/share/doc/opencv-doc/examples/data
if [ ! -f "$DATA/graf1.png" ]; then
  apt-get install -y opencv-doc > /dev/null
fi
PY=.venv/bin/python
[ -x "$PY" ] || python3 -m venv .venv
if ! "$PY" -c "import cv2, faiss, numpy" 2> /dev/null; then
  .venv/bin/pip install -q numpy opencv-python-headless faiss-cpu
fi
cargo build --release -q -p remora-cli
B=${CARGO_TARGET_DIR:-target}/release/remora

echo "match bench: $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), threads=$THREADS" >&2

# label | image A (train) | image B (queries) | upscale factor | SIFT contrastThreshold (OpenCV's
# default 0.04) | nfeatures of A | nfeatures of B (0 = all). Larger sets: the same overlapping pair
# (graffiti 3 and 1: a change of viewpoint of about 30°; Leuven A and B: the same view, darker)
# resized with cv2.INTER_LINEAR and a lower contrast threshold, so that SIFT finds more points;
# nfeatures keeps the strongest ones.
SIZES=(
  "box-default|box.png|box_in_scene.png|1|0.04|0|0"
  "graf-default|graf3.png|graf1.png|1|0.04|0|0"
  "graf-x2-ct0.01|graf3.png|graf1.png|2|0.01|0|0"
  "graf-x2.5-ct0.004-47k-30k|graf3.png|graf1.png|2.5|0.004|47000|30000"
  "leuven-x3-ct0.004-47k-30k|leuvenA.jpg|leuvenB.jpg|3|0.004|47000|30000"
  "leuven-x3-ct0.004-50k|leuvenA.jpg|leuvenB.jpg|3|0.004|50000|50000"
)
SIZES=("${SIZES[@]:0:${NSIZES:-${#SIZES[@]}}}")

for s in "${SIZES[@]}"; do
  IFS='|' read -r label a b up ct nf nfq <<< "$s"
  d=$W/$label
  mkdir -p "$d"
  sift=$("$PY" bench/match_peers.py sift "$DATA/$a" "$DATA/$b" --out "$d" --upscale "$up" \
    --contrast-threshold "$ct" --nfeatures "$nf" --nfeatures-query "$nfq")
  echo "$label: $sift" >&2
  j=$("$B" bench match --train "$d/train.npy" --query "$d/query.npy" --threads "$THREADS" \
    --python "$PY" --json)
  echo "{\"label\":\"$label\",\"images\":\"$a $b x$up ct$ct n$nf/$nfq\",${j#\{}" >> "$OUT"
  # The AVX2 kernel on the same data (remora only), when this CPU has a faster one.
  if grep -q avx512_vnni /proc/cpuinfo; then
    j=$("$B" bench match --train "$d/train.npy" --query "$d/query.npy" --threads "$THREADS" \
      --no-peers --json --kernel avx2)
    echo "{\"label\":\"$label\",\"images\":\"$a $b x$up ct$ct n$nf/$nfq\",${j#\{}" >> "$OUT"
  fi
done

"$PY" - "$OUT" << 'EOF' | tee "$REPORT"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = lambda x, fmt: "–" if x is None else format(x, fmt)
print("| pair | queries × refs | kernel | remora s | GMAC/s | matches | FAISS s (×) | BF s (×) | FLANN s (×) | FLANN recall | FAISS diff | BF diff |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    ra = r["ratios"]
    peer = lambda k: "–" if r[f"{k}_seconds"] is None else f"{r[f'{k}_seconds']:.3f} ({ra[k]:.1f}x)"
    print(f"| {r['label']} | {r['n_query']:,} × {r['n_ref']:,} | {r['kernel']} | {r['seconds']:.3f} | "
          f"{r['gmacs']:.0f} | {r['matches']:,} | {peer('faiss')} | {peer('bf')} | {peer('flann')} | "
          f"{f(r['flann_recall'], '.4f')} | {f(r['faiss_agree'], 'd')} | {f(r['bf_agree'], 'd')} |")
EOF
