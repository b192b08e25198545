#!/usr/bin/env bash
# Builds the decode-attention test and benchmark binaries into .carry/dec/ (small and self-contained: only the
# attention objects, mk_core's dtype and the CPU reference), for bench/attention_decode_run.sh on the GPU machine.
# Usage: bench/attention_decode_build.sh [build-dir]   (default build-dec; configured with cmake -G Ninja)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-dec}
export PATH=$PATH:/usr/local/cuda/bin
objs=(CMakeFiles/mk_cpu.dir/src/cpu/attention_ref.cpp.o CMakeFiles/mk_core.dir/src/core/dtype.cpp.o)
for f in src/cuda/attention/*.cu; do objs+=("CMakeFiles/mk_cuda.dir/$f.o"); done
ninja -C "$B" -j2 "${objs[@]}"
mkdir -p .carry/dec
grep -qxF '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++20 -O2 -Isrc -Iinclude -diag-suppress 2810"
full=(); for o in "${objs[@]}"; do full+=("$B/$o"); done
$NV -o .carry/dec/dec_test tests/gpu/test_attention_decode.cu "${full[@]}" -lgtest -lgtest_main -lpthread
$NV -DMK_HAVE_CUDA=1 -x cu -c -o .carry/dec/dec_bench.o bench/attention.cpp
$NV -o .carry/dec/dec_bench .carry/dec/dec_bench.o "${full[@]}"
rm .carry/dec/dec_bench.o
strip .carry/dec/dec_test .carry/dec/dec_bench
ls -la .carry/dec
