#!/usr/bin/env bash
# Cores each thread of the processes matching PATTERN uses over SECONDS, from the utime + stime
# of /proc/PID/task/*/stat (what docs/bench/daq.md's per-thread tables come from). Threads of
# the same name with a module suffix (remu-r0-m3) are summed as one line (remu-tx).
#   scripts/thread-cpu.sh 'remora daq (emulate|receive)' 5   # while `remora daq run X.toml` runs
set -euo pipefail
pattern=${1:?usage: thread_cpu.sh PATTERN [SECONDS]}
secs=${2:-5}
hz=$(getconf CLK_TCK)
snap() {
    for p in $(pgrep -f "$pattern"); do
        for t in /proc/"$p"/task/*; do
            [ -r "$t/stat" ] || continue
            # comm may hold spaces; the fields after ") " are fixed.
            local stat comm
            stat=$(cat "$t/stat" 2>/dev/null) || continue
            comm=$(cat "$t/comm" 2>/dev/null | tr ' ' _) || continue
            echo "${t##*/} $comm $(echo "${stat##*) }" | awk '{print $12 + $13}')"
        done
    done | sort
}
a=$(snap)
t0=$(date +%s.%N)
sleep "$secs"
b=$(snap)
t1=$(date +%s.%N)
join <(echo "$a") <(echo "$b") | awk -v dt="$(echo "$t1 - $t0" | bc -l)" -v hz="$hz" '
    { n = $2; sub(/-r[0-9]+-m[0-9]+$/, "-tx", n); use[n] += ($5 - $3) / hz / dt; all += ($5 - $3) / hz / dt }
    END { for (n in use) if (use[n] > 0.0005) printf "%.3f %s\n", use[n], n; printf "%.3f total\n", all }' |
    sort -rn
