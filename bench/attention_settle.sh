#!/usr/bin/env bash
# One device call that compares prefill builds back to back (ABBA order, so that drift or ordering cannot
# favour one) and measures the decode launch variants, with the tests and racecheck of the changed kernels and
# the cuDNN peers in the same call. Run from the repo root on the device; logs under $OUT.
# Builds (bench/attention_build.sh, copied per variant): .carry/attn = the working tree; the others are named
# on the command line and hold attn_bench (and attn_test where they are a candidate default).
# Usage: bench/attention_settle.sh DIR_A DIR_B [DIR_C ...]   (e.g. .carry/attn .carry/attn_v4)
#   SETTLE_TEST_A / SETTLE_TEST_B: gtest filters run on DIR_A's / DIR_B's attn_test (empty: skip);
#   SETTLE_RACE_A / SETTLE_RACE_B: racecheck filters on them; SETTLE_FOCUS=0 skips the decode variants.
set -uo pipefail
OUT=${OUT:-/tmp/attn_settle}; mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
dirs=("$@")
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run_tests() {  # dir filter tag
  [ -z "$2" ] && return
  timeout 60 "$1/attn_test" --gtest_filter="$2" > "$OUT/test_$3.log" 2>&1
  echo "test $3 rc=$? ($(el))"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is|naive|differs" "$OUT/test_$3.log" | head -20
}
run_race() {  # dir filter tag
  [ -z "$2" ] && return
  timeout 40 $CS --tool racecheck --error-exitcode 1 "$1/attn_test" --gtest_filter="$2" > "$OUT/race_$3.log" 2>&1
  echo "racecheck $3 rc=$? ($(el))"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/race_$3.log" | head -4
}
run_tests "${dirs[0]}" "${SETTLE_TEST_A:-}" A
run_tests "${dirs[1]}" "${SETTLE_TEST_B:-}" B
run_race "${dirs[0]}" "${SETTLE_RACE_A:-}" A
run_race "${dirs[1]}" "${SETTLE_RACE_B:-}" B
# ABBA: every build once forwards, once backwards.
order=("${dirs[@]}")
for ((i = ${#dirs[@]} - 1; i >= 0; --i)); do order+=("${dirs[i]}"); done
n=0
for d in "${order[@]}"; do
  n=$((n + 1))
  tag=$(basename "$d")
  timeout 30 "$d/attn_bench" settle > "$OUT/settle_${n}_${tag}.log" 2>&1
  echo "settle #$n $tag rc=$? ($(el))"
  grep '^\[prefill\]' "$OUT/settle_${n}_${tag}.log" | sed "s/^/  /"
done
if [ "${SETTLE_FOCUS:-1}" = 1 ]; then
  timeout 60 "${dirs[0]}/attn_bench" decfocus > "$OUT/decfocus.log" 2>&1; echo "decfocus rc=$? ($(el))"
  grep -v RESULT "$OUT/decfocus.log"
  PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_decode_peers.py "$OUT/decfocus.log" --backends CUDNN \
    --max-gb 1.1 > "$OUT/decode_peers.log" 2>&1; echo "decode peers rc=$? ($(el))"
  grep -E "^\s*(64|128) .* default " "$OUT/decode_peers.log" | head -12
fi
# cuDNN on the settle shapes (16k, batch 2), rows taken from the first build's first run.
sed 's/"tag":"settle"/"tag":"table"/' "$OUT/settle_1_$(basename "${dirs[0]}").log" > "$OUT/settle_rows.log"
PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_peers.py "$OUT/settle_rows.log" --backends CUDNN \
  > "$OUT/prefill_peers.log" 2>&1; echo "prefill peers rc=$? ($(el))"
grep -E "^prefill" "$OUT/prefill_peers.log"
