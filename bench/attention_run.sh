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
#   ATTN_NCU=1: at the end, Nsight Compute (clocks not locked) on `attn_bench ncu` (one default launch, 16k, batch 2,
#   non-causal, head dim 64 then 128): duration, tensor pipe, L2 hit rate, stall reasons per issue, into ncu.log.
#   ATTN_CLOCK=1: before the peers, `attn_bench clock` (1.5 s of back-to-back launches per head dim) with an
#   nvidia-smi clock / power log alongside (clocks.log), summarised by bench/attention_clock_summary.py.
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
if [ "${ATTN_CLOCK:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
    > "$OUT/clocks.log" 2>&1 &
  smi=$!
  timeout 20 $A/attn_bench clock > "$OUT/clock.log" 2>&1; echo "clock rc=$? ($(( $(date +%s) - t0 )) s)"
  kill $smi
  python3 bench/attention_clock_summary.py "$OUT/clock.log" "$OUT/clocks.log"
fi
if [ $peers = 1 ]; then
  left=$(( ${ATTN_DEADLINE:-95} - ($(date +%s) - t0) )); [ $left -lt 10 ] && left=10
  PYTHONUNBUFFERED=1 timeout $left python3 bench/attention_peers.py "$OUT/bench.log" --backends "${ATTN_PEER_BACKENDS:-CUDNN,FLASH}" > "$OUT/peers.log" 2>&1; echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -v RESULT "$OUT/peers.log" | tail -60
fi
if [ "${ATTN_NCU:-0}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 60 $NCU --clock-control none --kernel-name regex:prefill_hopper --section SpeedOfLight \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --page raw \
    $A/attn_bench ncu > "$OUT/ncu.log" 2>&1
  echo "ncu rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "prefill_hopper_kernel<|gpu__time_duration.sum |sm__cycles_elapsed.avg.per_second |sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active|lts__t_sector_hit_rate.pct |smsp__average_warps_issue_stalled_(barrier|long_scoreboard|wait|math_pipe_throttle|short_scoreboard|mio_throttle|dispatch_stall|not_selected)_per_issue_active.ratio " \
    "$OUT/ncu.log" | awk '{$1=$1};1' | cut -c1-110 | head -60
fi
