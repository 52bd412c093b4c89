#!/usr/bin/env bash
# Installs the Debian packages remora needs to build: the HDF5 C library and its headers (the
# acquisition writes NeXus/HDF5 files through hdf5-metno) and pkg-config, which finds them; cmake
# and nasm, which build the libjpeg-turbo 3 bundled with the turbojpeg crate (remora-resize).
# Only when missing, and only as root; quiet when everything is there.
set -euo pipefail
need=()
dpkg -s libhdf5-dev >/dev/null 2>&1 || need+=(libhdf5-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cmake >/dev/null || need+=(cmake)
command -v nasm >/dev/null || need+=(nasm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "build-deps: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "build-deps: missing ${need[*]}; install them (sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
