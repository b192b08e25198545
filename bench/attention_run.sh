#!/usr/bin/env bash
# One GPU round for the attention work (run on the device machine from the repo root, binaries from
# bench/attention_build.sh in .carry/attn): tests, compute-sanitizer memcheck + racecheck on small cases, the
# benchmark, and (with 'peers') the SDPA peers on the same shapes. Logs go to $OUT.
# Usage: bench/attention_run.sh [bench args...] [peers]
set -uo pipefail
OUT=${OUT:-/tmp/attn_out}; mkdir -p "$OUT"
A=.carry/attn
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
peers=0; args=()
for a in "$@"; do if [ "$a" = peers ]; then peers=1; else args+=("$a"); fi; done
timeout 60 $A/attn_test 2>&1 | tee "$OUT/test.log" | grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|error" | head -40
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 40 $CS --tool memcheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize*' > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.log"
timeout 50 $CS --tool racecheck --error-exitcode 1 $A/attn_test --gtest_filter='AttentionSanitize*' > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"; tail -3 "$OUT/racecheck.log"
timeout 100 $A/attn_bench "${args[@]}" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
grep -v RESULT "$OUT/bench.log"
if [ $peers = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/attention_peers.py "$OUT/bench.log" > "$OUT/peers.log" 2>&1; echo "peers rc=$?"
  grep -v RESULT "$OUT/peers.log" | tail -80
fi
