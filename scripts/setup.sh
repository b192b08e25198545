#!/usr/bin/env bash
# Installs what megakernel needs (Debian packages, Python packages for the differential tests) and builds it
# into build/. CUDA code is compiled when nvcc is found (PATH or /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="build-essential cmake ninja-build ccache pkg-config python3 python3-pip nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcli11-dev libgtest-dev libcpp-httplib-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

python3 -m pip install -q --disable-pip-version-check -r requirements-test.txt 2>/dev/null \
  || python3 -m pip install -q --disable-pip-version-check --break-system-packages -r requirements-test.txt

export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
