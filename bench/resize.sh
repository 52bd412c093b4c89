#!/usr/bin/env bash
# `remora resize` batch against vipsthumbnail (libvips, one process over all files) and
# ImageMagick 6 `convert` (one process per image, with and without `-define jpeg:size`), on the
# same real photographs and cores, fitting GEOMETRY (500x500) at quality 85, with the SSIM of
# every output against an f64 Lanczos3 reference of the full-size decode.
# Image sets (all real photographs from Debian packages, nothing generated):
#   opencv       the JPEGs of opencv-doc's samples (59 files, mostly 0.3 Mpx)
#   photos-2000  lomiri-wallpapers-16.04's photographs fitted to 2000x2000 by ImageMagick at Q92
#                (the 2000x1333-class input of the issue's goal)
#   photos-full  the same photographs at full size (4.7-16.8 Mpx)
# (umang_by_Abhishek_Mudgal.jpg is left out: a computer-made gradient, not a photograph.)
# Usage: bash bench/resize.sh [THREADS]     (default 2)
# Prints a markdown table and writes it to bench/out/resize.md, JSON lines to $OUT
# (bench/out/resize.jsonl); bench/out is not tracked: docs/bench/resize.md is updated by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
GEOMETRY=${GEOMETRY:-500x500}
QUALITY=${QUALITY:-85}
mkdir -p bench/out
OUT=${OUT:-bench/out/resize.jsonl}
REPORT=bench/out/resize.md
W=bench/out/resize-images
: > "$OUT"

need=()
[ -x /usr/bin/vipsthumbnail ] || need+=(libvips-tools)
[ -x /usr/bin/convert ] || need+=(imagemagick)
ls /usr/share/doc/opencv-doc/examples/data/*.jpg > /dev/null 2>&1 || need+=(opencv-doc)
dpkg -s lomiri-wallpapers-16.04 > /dev/null 2>&1 || need+=(lomiri-wallpapers-16.04)
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y --no-install-recommends "${need[@]}" > /dev/null
fi
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p remora-cli   # NO_BUILD=1: use the built binary
B=${CARGO_TARGET_DIR:-target}/release/remora

# The photograph sets.
mkdir -p "$W/opencv" "$W/photos-full" "$W/photos-2000"
cp -u /usr/share/doc/opencv-doc/examples/data/*.jpg "$W/opencv/"
for f in $(dpkg -L lomiri-wallpapers-16.04 | grep -i '\.jpg$' | grep -v umang_by_Abhishek_Mudgal); do
  n=$(basename "$f")
  cp -u "$f" "$W/photos-full/$n"
  [ -f "$W/photos-2000/$n" ] || /usr/bin/convert "$f" -resize '2000x2000>' -quality 92 "$W/photos-2000/$n"
done

echo "resize bench: $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), threads=$THREADS, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "  $(/usr/bin/convert -version | head -1); $(vipsthumbnail --version)" >&2

for set in opencv photos-2000 photos-full; do
  j=$("$B" bench resize --dir "$W/$set" --geometry "$GEOMETRY" --quality "$QUALITY" \
    --threads "$THREADS" --json)
  echo "{\"set\":\"$set\",${j#\{}" >> "$OUT"
  echo "$set done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

python3 - "$OUT" << 'PY' | tee "$REPORT"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = lambda x, fmt: "–" if x is None else format(x, fmt)
print("| set | images | input Mpx | load | tool | images/s | Mpx/s | remora × |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    m, ra = r["mpx_per_s"], r["ratios"]
    tools = [("remora resize", r["remora_ips"], m["remora"], None),
             ("vipsthumbnail", r["vips_ips"], m["vips"], ra["vips"]),
             ("convert", r["imagemagick_ips"], m["imagemagick"], ra["imagemagick"]),
             (f"convert -define jpeg:size={r['imagemagick_jpeg_size']}",
              r["imagemagick_jpeg_size_ips"], m["imagemagick_jpeg_size"], ra["imagemagick_jpeg_size"])]
    for i, (t, ips, mpx, x) in enumerate(tools):
        head = (f"| {r['set']} | {r['images']} | {r['input_mpx']:.1f} | {f(r['load'], '.2f')} "
                if i == 0 else "| | | | ")
        print(f"{head}| {t} | {f(ips, '.1f')} | {f(mpx, '.1f')} | {f(x, '.2f')} |")
print()
print("| set | SSIM min remora | reference at same Q | largest shortfall | vipsthumbnail | convert |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['set']} | {f(r['ssim_min'], '.4f')} | {f(r['ssim_ref_min'], '.4f')} | "
          f"{f(r['ssim_gap_max'], '.4f')} | {f(r['vips_ssim_min'], '.4f')} | {f(r['imagemagick_ssim_min'], '.4f')} |")
PY
