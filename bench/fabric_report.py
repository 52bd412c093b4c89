"""Turns bench/out/fabric.jsonl (from bench/fabric.sh) into markdown on stdout (bench/fabric.sh
writes it to bench/out/fabric.md; docs/bench/fabric.md is updated from it by hand)."""
import datetime
import json
import platform
import subprocess
import sys

rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows[d["name"]] = d["result"]


def gbps(name):
    r = rows.get(name, {})
    if "bw_avg_gbps" in r:
        return r["bw_avg_gbps"]
    if "gbps" in r:
        return r["gbps"]
    if "mbps" in r:
        return r["mbps"] * 8 * 1.048576 / 1000  # ucx prints MiB/s... as MB/s of 2^20 bytes
    return float("nan")


def lat(name, key="t_typical_us"):
    r = rows.get(name, {})
    return r.get(key, r.get("lat_typical_us", float("nan")))


cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
load = open("/proc/loadavg").read().split()[:3]
print("# Fabric benchmarks\n")
print(f"Measured {datetime.date.today()} on {cpu}, {platform.system()} {platform.release()}, "
      f"2 cores; load average at the end {' '.join(load)} (other jobs may have shared the cores).")
print("All figures from one run of `bash bench/fabric.sh` (release build, loopback). "
      "ucx_perftest 1.13 (`ucp_put_bw`/`ucp_put_lat`, `UCX_TLS=tcp` and `UCX_TLS=sm`); "
      "`bench/udp_loop.c` is a plain blocking sendto/recvfrom loop; `bench/memcpy_bw.c` copies "
      "through 256 MiB buffers.\n")
print("## Bandwidth (Gb/s, higher is better)\n")
print("| what | 64 KiB messages | 1 MiB messages |")
print("| --- | --- | --- |")
for label, key in [
    ("remora udp RC WRITE (4 KiB MTU)", "remora_udp_write_bw_{}"),
    ("remora udp RC WRITE, --progress poll", "remora_udp_poll_write_bw_{}"),
    ("remora udp UC WRITE (sender side)", "remora_udp_uc_write_bw_{}"),
    ("remora tcp RC WRITE", "remora_tcp_write_bw_{}"),
    ("remora tcp RC WRITE, --progress poll", "remora_tcp_poll_write_bw_{}"),
    ("remora shm RC WRITE", "remora_shm_write_bw_{}"),
    ("ucx_perftest tcp put_bw", "ucx_tcp_put_bw_{}"),
    ("ucx_perftest shm put_bw", "ucx_shm_put_bw_{}"),
]:
    print(f"| {label} | {gbps(key.format(65536)):.2f} | {gbps(key.format(1048576)):.2f} |")
print(f"| plain UDP sendto/recvfrom, 4 KiB datagrams | {gbps('udp_loop_4k'):.2f} | |")
print(f"| memcpy through 256 MiB (64 KiB / 1 MiB blocks) | {gbps('memcpy_64k'):.2f} | {gbps('memcpy_1m'):.2f} |")
print(f"| memcpy of the same 1 MiB buffers again and again | | {gbps('memcpy_1m_same'):.2f} |")
print(f"| remora udp RC SEND | {gbps('remora_udp_send_bw_65536'):.2f} | |")
print("\n## Ratios against the goals\n")
u = gbps("remora_udp_write_bw_65536"), gbps("remora_udp_write_bw_1048576")
print(f"- udp WRITE at 4 KiB MTU / plain UDP loop: {u[0] / gbps('udp_loop_4k'):.1f}x (64 KiB), "
      f"{u[1] / gbps('udp_loop_4k'):.1f}x (1 MiB); goal >= 3x")
print(f"- udp WRITE / ucx_perftest tcp put_bw: {u[0] / gbps('ucx_tcp_put_bw_65536'):.2f}x (64 KiB), "
      f"{u[1] / gbps('ucx_tcp_put_bw_1048576'):.2f}x (1 MiB); goal >= 1x")
s = gbps("remora_shm_write_bw_1048576")
print(f"- shm WRITE of 1 MiB / memcpy of the same 1 MiB buffers (what the benchmark does): "
      f"{s / gbps('memcpy_1m_same'):.2f}x; goal >= 0.8x "
      f"(against memcpy streaming through 256 MiB: {s / gbps('memcpy_1m'):.2f}x)")
print(f"- shm WRITE of 1 MiB / ucx_perftest shm put_bw: {s / gbps('ucx_shm_put_bw_1048576'):.2f}x")
print("\n## Latency, 8 bytes (microseconds, typical = median)\n")
print("| what | typical | average | p99 |")
print("| --- | --- | --- | --- |")
for t in ["udp", "udp_poll", "udp_spin", "shm", "shm_poll", "shm_spin", "tcp", "tcp_poll",
          "tcp_spin", "tcp_lazy"]:
    label = (t.replace("_poll", ", --progress poll,").replace("_spin", ", --progress poll --spin,")
             .replace("_lazy", ", --progress poll --spin --lazy-ack,"))
    for op, nm in [("write", "WRITE one-way"), ("read", "READ round trip")]:
        k = f"remora_{t}_{op}_lat"
        print(f"| remora {label} {nm} | {lat(k):.2f} | {lat(k, 't_avg_us'):.2f} | {lat(k, 't_p99_us'):.2f} |")
for t in ["tcp", "shm"]:
    k = f"ucx_{t}_put_lat"
    print(f"| ucx_perftest {t} put_lat | {lat(k):.2f} | {rows.get(k, {}).get('lat_avg_us', float('nan')):.2f} | |")
ut = lat("ucx_tcp_put_lat")
print("\nAgainst the latency goals (WRITE typical <= ucx tcp put_lat for udp and tcp; shm <= 0.5 us "
      "WRITE and <= 1 us READ):\n")
for k, nm in [("remora_udp_write_lat", "udp, progress thread"),
              ("remora_udp_poll_write_lat", "udp, progress poll"),
              ("remora_udp_spin_write_lat", "udp, progress poll, busy polling"),
              ("remora_tcp_write_lat", "tcp, progress thread"),
              ("remora_tcp_poll_write_lat", "tcp, progress poll"),
              ("remora_tcp_spin_write_lat", "tcp, progress poll, busy polling"),
              ("remora_tcp_lazy_write_lat", "tcp, progress poll, busy polling, lazy ACKs")]:
    print(f"- {nm}: {lat(k):.2f} us = {lat(k) / ut:.2f}x ucx tcp put_lat ({ut:.2f} us)")
for k, nm in [("remora_shm", "shm, progress thread"), ("remora_shm_poll", "shm, progress poll"),
              ("remora_shm_spin", "shm, progress poll, busy polling")]:
    print(f"- {nm}: WRITE {lat(k + '_write_lat'):.3f} us, READ {lat(k + '_read_lat'):.3f} us "
          f"(ucx shm put_lat {lat('ucx_shm_put_lat'):.3f} us)")
print(f"- shm 64 KiB WRITE bandwidth with busy polling: {gbps('remora_shm_spin_write_bw_65536'):.2f} Gb/s")
print("\n## Commands\n")
print("```\nmake build && bash bench/fabric.sh\n```\n")
print("Each remora line is `remora fabric bench TEST --transport T --size S --iters N --json` "
      "(it starts its own responder process); each ucx line is `ucx_perftest -p PORT` beside "
      "`ucx_perftest 127.0.0.1 -p PORT -t ucp_put_bw|ucp_put_lat -s S -n N`.")
print("\n## Raw results\n")
print("```")
for k, v in rows.items():
    print(k, json.dumps(v))
print("```")
