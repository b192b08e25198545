#!/usr/bin/env bash
# One GPU round for decode attention (run on the device machine from the repo root; binaries from
# bench/attention_build.sh in .carry/attn): decode tests, compute-sanitizer memcheck + racecheck on the
# small decode cases, the decode benchmark table (read ceiling measured in the same process), then the SDPA
# peers (cuDNN, FLASH) on the same shapes in the same call. Logs go to $OUT; a summary table is printed last.
# Usage: [A=.carry/dec] [PEERS=0] [PEER_MAX_GB=1.1] bench/attention_decode_run.sh [bench args...]   (default: decode; peers only on shapes
# with at most PEER_MAX_GB of K+V)
set -uo pipefail
OUT=${OUT:-/tmp/dec_out}; mkdir -p "$OUT"
A=${A:-.carry/attn}  # binaries folder (A=.carry/dec for the decode engineer's own build)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
timeout ${TEST_TIMEOUT:-40} $A/attn_test --gtest_filter='AttentionDecode*:AttentionKvAppend*:AttentionSanitize.Decode*' > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is|naive|differs|^\[       OK" "$OUT/test.log" | head -40
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 25 $CS --tool memcheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize.Decode*' > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
timeout 30 $CS --tool racecheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize.Decode*' > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
args=("$@"); [ ${#args[@]} = 0 ] && args=(decode)
timeout ${BENCH_TIMEOUT:-50} $A/attn_bench "${args[@]}" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
if [ "${PEERS:-1}" = 0 ]; then  # PEERS=0: no SDPA peers; the benchmark's own table instead
  grep -v RESULT "$OUT/bench.log" | tail -${BENCH_LINES:-80}
else
  PYTHONUNBUFFERED=1 timeout 50 python3 bench/attention_decode_peers.py "$OUT/bench.log" --max-gb ${PEER_MAX_GB:-1.1} > "$OUT/peers.log" 2>&1; echo "peers rc=$?"
  grep -v RESULT "$OUT/bench.log" | grep -v "^\[decode\] D=.*splits=  \?[0-9]* calls" | head -5
  grep -v RESULT "$OUT/peers.log" | tail -60
fi
