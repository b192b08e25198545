#!/usr/bin/env bash
# Packs binaries of build/ for the GPU machine, which runs what this machine built: stripped, with the shared libraries
# it lacks (utf8proc, pcre2) under lib/, into .carry/NAME.tgz (git-ignored; pass ".carry" as the run's carry, then
# `tar xzf .carry/NAME.tgz -C .carry` there and point LD_LIBRARY_PATH at .carry/NAME/lib -- scripts/mk_ab.sh and
# scripts/lead_round.sh take the folder). The working tree and the carry travel together under 64 MiB: pack only
# what a call runs (megakernel_decode ~8 MB packed, test_gpu and megakernel ~9 MB each).
# Usage: scripts/pack_bins.sh NAME [BINARY...]   (default: megakernel test_gpu megakernel_decode)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
shift
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=(megakernel test_gpu megakernel_decode)
rm -rf ".carry/$name" && mkdir -p ".carry/$name/lib"
for b in "${bins[@]}"; do cp "build/$b" ".carry/$name/" && strip ".carry/$name/$b"; done
for l in libutf8proc.so.2 libpcre2-8.so.0; do cp "/lib/x86_64-linux-gnu/$l" ".carry/$name/lib/"; done
tar czf ".carry/$name.tgz" -C .carry "$name" && rm -rf ".carry/$name"
ls -la ".carry/$name.tgz"
