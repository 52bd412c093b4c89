# Shared by the device scripts (sourced): where results go, the earlier build (base.tgz, a
# packed remora binary, when present), and `run NAME TIMEOUT CMD...`, which keeps each command's
# JSON and stderr and re-tars everything into $OUT after every step, so a run cut short still
# brings back what it measured.
OUTDIR=${OUT:-/tmp/out}; O=/tmp/results; rm -rf "$O"; mkdir -p "$O" "$OUTDIR"
here=${PORTABLE:-$(pwd)/.portable}
BASE=
if [ -f "$here/base.tgz" ]; then
  mkdir -p /tmp/base && tar xzf "$here/base.tgz" -C /tmp/base && BASE=/tmp/base/remora
fi
export REMORA_GPU=${REMORA_GPU:-gpu} XDG_CACHE_HOME=/tmp/cache
log=$O/log.txt
{ nvidia-smi -L; nproc; lscpu | grep 'Model name'; } > "$log" 2>&1
run() { # name timeout cmd...
  local n=$1 t=$2; shift 2
  local s=$SECONDS
  timeout "$t" "$@" > "$O/$n.json" 2> "$O/$n.err"
  echo "$n rc=$? $((SECONDS - s)) s" >> "$log"
  cp "$log" "$OUTDIR/log.txt"; tar czf "$OUTDIR/results.tgz" -C "$O" .
}
finish() {
  ls -la "$O" >> "$log"; cp "$log" "$OUTDIR/log.txt"; tar czf "$OUTDIR/results.tgz" -C "$O" .
}
