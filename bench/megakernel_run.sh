#!/bin/bash
# GPU round of the megakernel (run on the device machine from the repo root, binaries built here and carried in
# .carry/mk, or packed: MK_UNPACK=.carry/mkz/bins.tgz is unpacked into .carry/mk first; test_gpu links libutf8proc.so.2,
# which the device lacks: pack it beside the binaries, e.g. from /lib/x86_64-linux-gnu): GPU tests, compute-sanitizer
# memcheck and racecheck on small cases, then the decode benchmark. Logs under $OUT (at most 8 files come back).
# Time limits (s): MK_TEST_S, MK_SAN_S, MK_RACE_S (0 = no racecheck), MK_BENCH_S; MK_FILTER selects the GPU tests,
# MK_SAN_FILTER the memcheck test, MK_RACE_FILTER the racecheck test, MK_SHAPES the bench shapes (bench
# environment: MK_CTX, MK_REPS, MK_SET, ... in megakernel_decode.cpp).
# A second bench run with its own settings when MK_BENCH2_S is set: MK_SHAPES2 (llama-3.1-8b), MK_CTX2 (32),
# MK_REPS2 (3), MK_SET2 (d,o).
# MK_OLD="<file in .carry/mk> ...": earlier builds' megakernel_decode, run after the first bench with MK_OLD_SET (d),
# MK_OLD_CTX (as MK_CTX) and no layered peer, so that the builds are measured in the same call (all into
# bench_old.log); MK_OLD2 likewise after the second bench (bench2_old.log). Racecheck runs last.
export LD_LIBRARY_PATH=$PWD/.carry/mk:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/mk_out}; mkdir -p $OUT
if [ -n "$MK_UNPACK" ]; then mkdir -p .carry/mk && tar -C .carry/mk -xzf "$MK_UNPACK"; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/gpu.txt
timeout ${MK_TEST_S:-100} .carry/mk/test_gpu --gtest_filter="${MK_FILTER:-Megakernel*}" 2>&1 | tee $OUT/test.log | grep -E "OK|FAILED|Failure|error|Expected|Which|pos|token" | head -60
timeout ${MK_SAN_S:-60} compute-sanitizer --tool memcheck .carry/mk/test_gpu --gtest_filter=${MK_SAN_FILTER:-Megakernel.MatchesLayeredBackend} > $OUT/sanitizer.log 2>&1; echo "memcheck rc=$?"; tail -4 $OUT/sanitizer.log
timeout ${MK_BENCH_S:-100} .carry/mk/megakernel_decode ${MK_SHAPES:-llama-3.2-1b} 2>&1 | tee $OUT/bench.log
for b in $MK_OLD; do
  echo "== $b" >> $OUT/bench_old.log
  MK_LAYERED=0 MK_CTX=${MK_OLD_CTX:-$MK_CTX} MK_SET=${MK_OLD_SET:-d} MK_SET_LONG=${MK_OLD_SET:-d} timeout ${MK_OLD_S:-60} .carry/mk/$b ${MK_SHAPES:-llama-3.2-1b} 2>&1 | tee -a $OUT/bench_old.log
done
if [ -n "$MK_BENCH2_S" ]; then
  MK_CTX=${MK_CTX2:-32} MK_REPS=${MK_REPS2:-3} MK_SET=${MK_SET2:-d,o} timeout $MK_BENCH2_S .carry/mk/megakernel_decode ${MK_SHAPES2:-llama-3.1-8b} 2>&1 | tee $OUT/bench2.log
  for b in $MK_OLD2; do
    echo "== $b" >> $OUT/bench2_old.log
    MK_LAYERED=0 MK_CTX=${MK_CTX2:-32} MK_REPS=${MK_REPS2:-3} MK_SET=${MK_OLD_SET:-d} timeout $MK_BENCH2_S .carry/mk/$b ${MK_SHAPES2:-llama-3.1-8b} 2>&1 | tee -a $OUT/bench2_old.log
  done
fi
if [ "${MK_RACE_S:-0}" != 0 ]; then
  timeout $MK_RACE_S compute-sanitizer --tool racecheck .carry/mk/test_gpu --gtest_filter=${MK_RACE_FILTER:-Megakernel.ShortAttentionTiny} > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -4 $OUT/racecheck.log
fi
