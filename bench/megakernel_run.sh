#!/bin/bash
# GPU round of the megakernel (run on the device machine from the repo root, binaries built here and carried in
# .carry/mk): GPU tests, compute-sanitizer on one small case, then the decode benchmark. Logs under $OUT.
# Time limits (s): MK_TEST_S, MK_SAN_S, MK_BENCH_S; MK_FILTER selects the GPU tests, MK_SAN_FILTER the memcheck
# test, MK_SHAPES the bench shapes (bench environment: MK_CTX, MK_REPS, MK_SET, ... in megakernel_decode.cpp).
# A second bench run with its own settings when MK_BENCH2_S is set: MK_SHAPES2 (llama-3.1-8b), MK_CTX2 (32),
# MK_REPS2 (3), MK_SET2 (d,e4).
export LD_LIBRARY_PATH=$PWD/.carry/mk:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/mk_out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/gpu.txt
timeout ${MK_TEST_S:-100} .carry/mk/test_gpu --gtest_filter="${MK_FILTER:-Megakernel*}" 2>&1 | tee $OUT/test.log | grep -E "OK|FAILED|Failure|error|Expected|Which|pos|token" | head -60
timeout ${MK_SAN_S:-60} compute-sanitizer --tool memcheck .carry/mk/test_gpu --gtest_filter=${MK_SAN_FILTER:-Megakernel.MatchesLayeredBackend} > $OUT/sanitizer.log 2>&1; echo "sanitizer rc=$?"; tail -4 $OUT/sanitizer.log
timeout ${MK_BENCH_S:-100} .carry/mk/megakernel_decode ${MK_SHAPES:-llama-3.2-1b} 2>&1 | tee $OUT/bench.log
if [ -n "$MK_BENCH2_S" ]; then
  MK_CTX=${MK_CTX2:-32} MK_REPS=${MK_REPS2:-3} MK_SET=${MK_SET2:-d,e4} timeout $MK_BENCH2_S .carry/mk/megakernel_decode ${MK_SHAPES2:-llama-3.1-8b} 2>&1 | tee $OUT/bench2.log
fi
