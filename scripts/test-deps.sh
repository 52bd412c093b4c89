#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian machine: peers and tools from Debian, and a
# Python virtual environment under .venv with maturin, pytest and the Python peers.
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: peers the tests talk to (memcached, memccapable), tshark for decoding captures,
# iproute2 for network namespaces, Chromium and its driver for the live view page's test,
# opencv-doc for the real photographs (with ground truth) the matcher's tests compute SIFT on,
# imagemagick (/usr/bin/convert) for the resize tests' reference geometry, and Mesa's software
# Vulkan driver (lavapipe) on which the GPU engines are tested without a GPU.
# Installed only when missing, and only as root.
need=()
command -v memcached >/dev/null || need+=(memcached)
command -v memccapable >/dev/null || need+=(libmemcached-tools)
command -v tshark >/dev/null || need+=(tshark)
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
[ -f /usr/share/doc/opencv-doc/examples/data/graf1.png ] || need+=(opencv-doc)
[ -x /usr/bin/convert ] || need+=(imagemagick)
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test-deps: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "test-deps: missing ${need[*]} (not root: tests that need them will skip)" >&2
  fi
fi

# Python environment.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
req=python/requirements-test.txt
stamp=.venv/.requirements-stamp
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r "$req"
  cp "$req" "$stamp"
fi
