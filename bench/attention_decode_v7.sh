#!/usr/bin/env bash
# Decode attention v7 device round (run on the device machine from the repo root; binaries built here as
# bench/attention_build.sh does into $A, plus $A/trace/attn_bench = the same with decode.cu compiled
# -DMK_DECODE_TRACE=1): the benchmark mode (default dectma, read ceiling in the same process), the trace,
# compute-sanitizer memcheck + racecheck on $SAN, the tests $TESTS (then $TESTS2 if set) of $TBIN (attn_test, or
# test_gpu with $A/lib holding libutf8proc.so.2, which the device lacks); logs in $OUT; a short table last.
# Usage: A=.carry/dec3 [TBIN=$A/test_gpu] [BENCH_MODE=dectma] [SAN=...] [TESTS=...] [TESTS2=...] bench/attention_decode_v7.sh
set -uo pipefail
OUT=${OUT:-/tmp/dec_out}; mkdir -p "$OUT"
A=${A:-.carry/dec3}
SAN=${SAN:-AttentionSanitize.Decode*}
TESTS=${TESTS:-AttentionDecode*:AttentionKvAppend*}
TBIN=${TBIN:-$A/attn_test}
export MK_REQUIRE_GPU=1  # test_gpu: a missing GPU is a failure, not a skip
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; done
export LD_LIBRARY_PATH="$A/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader > "$OUT/gpu.txt"
timeout ${BENCH_S:-45} $A/attn_bench ${BENCH_MODE:-dectma} > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
if [ -x $A/trace/attn_bench ] && [ "${TRACE:-1}" = 1 ]; then
  timeout ${TRACE_S:-12} $A/trace/attn_bench dectrace > "$OUT/trace.log" 2>&1; echo "trace rc=$?"
fi
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout ${SAN_S:-20} $CS --tool memcheck --error-exitcode 1 $TBIN --gtest_filter="$SAN" > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"
timeout ${SAN_S2:-25} $CS --tool racecheck --error-exitcode 1 $TBIN --gtest_filter="$SAN" > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"
timeout ${TEST_S:-45} $TBIN --gtest_filter="$TESTS" > "$OUT/test.log" 2>&1; echo "test rc=$?"
if [ -n "${TESTS2:-}" ]; then
  timeout ${TEST2_S:-20} $TBIN --gtest_filter="$TESTS2" >> "$OUT/test.log" 2>&1; echo "test2 rc=$?"
fi
cat "$OUT/gpu.txt"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|^\[       OK" "$OUT/test.log" | sed 's/^\[       OK \]/OK/' | head -40
grep "read ceiling" "$OUT/bench.log"
# bench rows: shape, temperature, variant, us, TB/s, % of read
grep "^\[decode\] D=" "$OUT/bench.log" | sed 's/= */=/g' | awk '{printf "%s %s %s %s %-16s %s %s %s\n", $2, $3, $4, $5, $6, $9, $11, $13}'
# trace: variant, period, PDL wait (median), loop median / max, publish, combine, tail
awk '/^\[trace\]/{split($0, h, " "); v = h[2] " " h[6]} /period/{gsub(/[|,]/, ""); p = $2; w = $NF}
     /K\/V loop/{gsub(/[|,()]/, ""); lm = $4; lx = $6}
     /publish/{gsub(/[|,]/, ""); printf "%s period %s wait %s loop %s/%s pub %s comb %s tail %s\n", v, p, w, lm, lx, $7, $12, $NF}' "$OUT/trace.log" 2>/dev/null
