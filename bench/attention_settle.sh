#!/usr/bin/env bash
# One device call that compares prefill builds back to back (ABBA order, so that drift or ordering cannot
# favour one) and measures the decode launch variants, with the tests and racecheck of the changed kernels and
# the cuDNN peers in the same call. Run from the repo root on the device. Logs under $OUT in few files (the
# device returns at most 8): summary on stdout, tests.log, race.log, settle.log, decfocus.log, peers.log.
# Steps in order of importance (a call cut at its time limit keeps the first ones): build 0's tests and
# racecheck, the ABBA settle runs, build 0's decode variants, the other builds' tests and racecheck, peers.
# Usage: bench/attention_settle.sh DIR0 DIR1 [DIR2 ...]   (each DIR holds attn_bench, and attn_test if tested)
#   SETTLE_TEST_<i> / SETTLE_RACE_<i>: gtest filters for build i's tests / racecheck (unset: skipped);
#   SETTLE_FOCUS=0 skips the decode variants.
set -uo pipefail
OUT=${OUT:-/tmp/attn_settle}; mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
dirs=("$@")
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
check() {  # build index: tests then racecheck
  local i=$1 d=${dirs[$1]} tv="SETTLE_TEST_$1" rv="SETTLE_RACE_$1"
  if [ -n "${!tv:-}" ]; then
    echo "===== tests build $i ($d): ${!tv}" >> "$OUT/tests.log"
    timeout 60 "$d/attn_test" --gtest_filter="${!tv}" >> "$OUT/tests.log" 2>&1
    echo "test $i rc=$? ($(el))"
    sed -n "/===== tests build $i /,\$p" "$OUT/tests.log" | grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is|naive|differs" | head -20
  fi
  if [ -n "${!rv:-}" ]; then
    echo "===== racecheck build $i ($d): ${!rv}" >> "$OUT/race.log"
    timeout 40 $CS --tool racecheck --error-exitcode 1 "$d/attn_test" --gtest_filter="${!rv}" >> "$OUT/race.log" 2>&1
    echo "racecheck $i rc=$? ($(el))"
    sed -n "/===== racecheck build $i /,\$p" "$OUT/race.log" | grep -E "RACECHECK SUMMARY|^\[  (PASSED|FAILED) " | head -4
  fi
}
check 0
# ABBA: every build once forwards, once backwards.
order=("${dirs[@]}")
for ((i = ${#dirs[@]} - 1; i >= 0; --i)); do order+=("${dirs[i]}"); done
n=0
for d in "${order[@]}"; do
  n=$((n + 1))
  echo "===== settle #$n $d" >> "$OUT/settle.log"
  timeout 30 "$d/attn_bench" settle > "$OUT/settle_cur.log" 2>&1
  rc=$?
  cat "$OUT/settle_cur.log" >> "$OUT/settle.log"
  echo "settle #$n $d rc=$rc ($(el)): $(grep '^\[prefill\]' "$OUT/settle_cur.log" | awk '{print $(NF-1)}' | tr '\n' ' ')"
done
cp "$OUT/settle_cur.log" "$OUT/settle_rows.log"  # the last run (build 0) feeds the prefill peers
rm -f "$OUT/settle_cur.log"
if [ "${SETTLE_FOCUS:-1}" = 1 ]; then
  timeout 60 "${dirs[0]}/attn_bench" decfocus > "$OUT/decfocus.log" 2>&1; echo "decfocus rc=$? ($(el))"
  grep -v RESULT "$OUT/decfocus.log" | sed 's/ calls=[0-9]*//; s/ of read//'
fi
for ((i = 1; i < ${#dirs[@]}; ++i)); do check $i; done
if [ "${SETTLE_FOCUS:-1}" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_decode_peers.py "$OUT/decfocus.log" --backends CUDNN \
    --max-gb 1.1 > "$OUT/peers.log" 2>&1; echo "decode peers rc=$? ($(el))"
  grep -E "^\s*(64|128) .* default " "$OUT/peers.log" | head -12
fi
sed -i 's/"tag":"settle"/"tag":"table"/' "$OUT/settle_rows.log"
PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_peers.py "$OUT/settle_rows.log" --backends CUDNN \
  >> "$OUT/peers.log" 2>&1; echo "prefill peers rc=$? ($(el))"
grep -E "^prefill" "$OUT/peers.log"
