#!/usr/bin/env bash
# Builds the attention test and benchmark binaries into .carry/attn/ (small, self-contained: only the attention
# objects, the read-ceiling probe, mk_core's dtype and the CPU reference), so they can travel to the GPU machine
# without the whole tree. Used by bench/attention_run.sh (prefill) and bench/attention_decode_run.sh (decode).
# Usage: bench/attention_build.sh [build-dir]   (default build-attn; configured with cmake -G Ninja)
#   ATTN_CARRY: output folder (default .carry/attn). A compile-time variant for an A/B call: configure a second
#   build dir with -DCMAKE_CUDA_FLAGS=-D<switch>, then ATTN_CARRY=.carry/attnB bench/attention_build.sh <that dir>
#   (then bench/attention_settle.sh on both folders).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-attn}
export PATH=$PATH:/usr/local/cuda/bin
objs=(CMakeFiles/mk_cpu.dir/src/cpu/attention_ref.cpp.o CMakeFiles/mk_core.dir/src/core/dtype.cpp.o)
for f in src/cuda/attention/*.cu src/cuda/common/read_ceiling.cu src/cuda/common/bench_timing.cu; do objs+=("CMakeFiles/mk_cuda.dir/$f.o"); done
ninja -C "$B" -j2 "${objs[@]}"
C=${ATTN_CARRY:-.carry/attn}
mkdir -p "$C"
grep -qxF '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++20 -O2 -Isrc -Iinclude -diag-suppress 2810"
full=(); for o in "${objs[@]}"; do full+=("$B/$o"); done
$NV -o "$C/attn_test" tests/gpu/test_attention.cu tests/gpu/test_attention_decode.cu "${full[@]}" \
  -lgtest -lgtest_main -lpthread
$NV -DMK_HAVE_CUDA=1 -x cu -c -o "$C/attn_bench.o" bench/attention.cpp
$NV -o "$C/attn_bench" "$C/attn_bench.o" "${full[@]}"
rm "$C/attn_bench.o"
strip "$C/attn_test" "$C/attn_bench"
ls -la "$C"
