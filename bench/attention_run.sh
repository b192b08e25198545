#!/usr/bin/env bash
# One GPU round for the attention work (run on the device machine from the repo root, binaries from
# bench/attention_build.sh in .carry/attn): tests, compute-sanitizer memcheck + racecheck on small cases, the
# benchmark, and (with 'peers') the SDPA peers on the same shapes. Logs go to $OUT. A hung test run (rc 124)
# skips the sanitizers and benchmarks the FA2-style kernel only.
# Usage: bench/attention_run.sh [bench args...] [peers]
#   ATTN_TESTS / ATTN_SANITIZE: gtest filters of the test and sanitizer steps (default all attention tests).
#   ATTN_FALLBACK: a folder with the previous build's binaries, benchmarked instead when the tests fail.
#   ATTN_DEADLINE: seconds from the start by which the peers step must end (default 95).
#   ATTN_TEST_S / ATTN_BENCH_S: time limits of the test and benchmark steps (default 40 / 60 s).
#   ATTN_PEER_BACKENDS: SDPA backends of the peers step (default CUDNN,FLASH).
#   ATTN_NCU=1: at the end, Nsight Compute (clocks not locked) on `attn_bench ncu` (16k, batch 2, head dim 128
#   then 64): SpeedOfLight, ComputeWorkloadAnalysis, WarpStateStats, into ncu.log.
set -uo pipefail
OUT=${OUT:-/tmp/attn_out}; mkdir -p "$OUT"
A=.carry/attn
TESTS=${ATTN_TESTS:-Attention*}
SAN=${ATTN_SANITIZE:-AttentionSanitize*}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
peers=0; args=()
for a in "$@"; do if [ "$a" = peers ]; then peers=1; else args+=("$a"); fi; done
t0=$(date +%s)
timeout ${ATTN_TEST_S:-40} $A/attn_test --gtest_filter="$TESTS" > "$OUT/test.log" 2>&1; trc=$?
echo "test rc=$trc ($(( $(date +%s) - t0 )) s)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[       OK|Failure|error|Expected|Which is|naive" "$OUT/test.log" | head -40
if [ $trc != 0 ] && [ -n "${ATTN_FALLBACK:-}" ] && [ -x "$ATTN_FALLBACK/attn_bench" ]; then
  echo "TESTS FAILED: benchmarking the fallback build in $ATTN_FALLBACK"; A=$ATTN_FALLBACK
elif [ $trc = 124 ]; then
  args+=(nohopper)
else
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 20 $CS --tool memcheck --error-exitcode 1 $A/attn_test --gtest_filter="$SAN" > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
  timeout 20 $CS --tool racecheck --error-exitcode 1 $A/attn_test --gtest_filter="$SAN" > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
fi
timeout ${ATTN_BENCH_S:-60} $A/attn_bench "${args[@]}" > "$OUT/bench.log" 2>&1; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -v RESULT "$OUT/bench.log"
if [ $peers = 1 ]; then
  left=$(( ${ATTN_DEADLINE:-95} - ($(date +%s) - t0) )); [ $left -lt 10 ] && left=10
  PYTHONUNBUFFERED=1 timeout $left python3 bench/attention_peers.py "$OUT/bench.log" --backends "${ATTN_PEER_BACKENDS:-CUDNN,FLASH}" > "$OUT/peers.log" 2>&1; echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -v RESULT "$OUT/peers.log" | tail -60
fi
if [ "${ATTN_NCU:-0}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 60 $NCU --clock-control none --kernel-name regex:prefill_hopper --launch-count 2 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats $A/attn_bench ncu > "$OUT/ncu.log" 2>&1
  echo "ncu rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "prefill_hopper_kernel|SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Pipe|Stall|Warp Cycles Per Issued|No Eligible|Active Warps Per" "$OUT/ncu.log" | head -60
fi
