#!/usr/bin/env bash
# The decode engineer's short device round (benchmark first, then the trace build, sanitizers, decode tests),
# for a call with little device time left: $OUT/{gpu,bench,trace,memcheck,racecheck,test}.log.
# Usage: A=.carry/dec bench/attention_decode_quick.sh [bench mode (default decfocus)] [test filter]
set -uo pipefail
OUT=${OUT:-/tmp/dec_out}; mkdir -p "$OUT"
A=${A:-.carry/dec}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 20 $A/attn_bench "${1:-decfocus}" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
[ -x $A/trace/attn_bench ] && { timeout 8 $A/trace/attn_bench dectrace > "$OUT/trace.log" 2>&1; echo "trace rc=$?"; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 15 $CS --tool memcheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize.Decode*' > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"
timeout 15 $CS --tool racecheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize.Decode*' > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"
timeout 45 $A/attn_test --gtest_filter="${2:-AttentionDecode*:AttentionKvAppend*}" > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is|^\[       OK" "$OUT/test.log" | head -30
grep -v RESULT "$OUT/trace.log" 2>/dev/null
grep -v RESULT "$OUT/bench.log" | sed 's/ calls=[0-9]* //; s/% of read//'
