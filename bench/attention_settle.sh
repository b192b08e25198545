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
#   SETTLE_CLOCK=1: an nvidia-smi log (SM clock, power, 50 ms) over the ABBA runs; each run's line gets the mean
#   SM clock and power of its loaded samples (> 300 W), so that TFLOP/s per GHz can be compared (clocks.log).
#   SETTLE_CLOCK_BUILDS="i j": then `attn_bench clock` (1.5 s of back-to-back launches per head dim) for those
#   builds in ABBA order, each summarised by bench/attention_clock_summary.py (sustained rate at the power cap).
#   SETTLE_PEERS=0 skips the cuDNN prefill peers.
#   SETTLE_MODE: the attn_bench mode of the ABBA runs (default settle: 16k batch 2; pfocus: the shapes where cuDNN
#   leads too); SETTLE_ROUNDS=2 repeats the ABBA sequence (ABBA ABBA).
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
mode=${SETTLE_MODE:-settle}
order=()
for ((r = 0; r < ${SETTLE_ROUNDS:-1}; ++r)); do
  order+=("${dirs[@]}")
  for ((i = ${#dirs[@]} - 1; i >= 0; --i)); do order+=("${dirs[i]}"); done
done
smi=""
if [ "${SETTLE_CLOCK:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 50 > "$OUT/clocks.log" 2>&1 &
  smi=$!
fi
# Mean SM clock (MHz) and power (W) of the nvidia-smi samples above 300 W between unix times $1 and $2.
loaded_clock() {
  python3 - "$OUT/clocks.log" "$1" "$2" <<'PY'
import datetime, sys
sel = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        mhz, w = float(f[1].split()[0]), float(f[2].split()[0])
    except (ValueError, IndexError):
        continue
    if float(sys.argv[2]) <= t.timestamp() <= float(sys.argv[3]) and w > 300:
        sel.append((mhz, w))
print(f"SM {sum(s[0] for s in sel) / len(sel):.0f} MHz {sum(s[1] for s in sel) / len(sel):.0f} W ({len(sel)})"
      if sel else "no loaded samples")
PY
}
n=0
for d in "${order[@]}"; do
  n=$((n + 1))
  echo "===== settle #$n $d" >> "$OUT/settle.log"
  ta=$(date +%s.%N)
  timeout 30 "$d/attn_bench" "$mode" > "$OUT/settle_cur.log" 2>&1
  rc=$?
  tb=$(date +%s.%N)
  cat "$OUT/settle_cur.log" >> "$OUT/settle.log"
  clk=""; [ -n "$smi" ] && clk=" | $(loaded_clock "$ta" "$tb")"
  tf=$(grep '^\[prefill\]' "$OUT/settle_cur.log" | awk '{print $(NF-1)}' | tr '\n' ' ')
  echo "settle #$n $d rc=$rc ($(el)): $tf$clk"
done
if [ -n "${SETTLE_CLOCK_BUILDS:-}" ]; then  # sustained: A B B A over the listed builds
  cb=(${SETTLE_CLOCK_BUILDS}); co=("${cb[@]}")
  for ((i = ${#cb[@]} - 1; i >= 0; --i)); do co+=("${cb[i]}"); done
  for i in "${co[@]}"; do
    timeout 20 "${dirs[$i]}/attn_bench" clock > "$OUT/clock_cur.log" 2>&1
    echo "===== clock build $i" >> "$OUT/settle.log"; cat "$OUT/clock_cur.log" >> "$OUT/settle.log"
    echo "clock build $i ($(el)):"
    python3 bench/attention_clock_summary.py "$OUT/clock_cur.log" "$OUT/clocks.log" | sed 's/^/  /'
  done
  rm -f "$OUT/clock_cur.log"
fi
[ -n "$smi" ] && kill "$smi"
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
if [ "${SETTLE_PEERS:-1}" = 1 ]; then
  sed -i "s/\"tag\":\"$mode\"/\"tag\":\"table\"/" "$OUT/settle_rows.log"
  PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_peers.py "$OUT/settle_rows.log" --backends CUDNN \
    >> "$OUT/peers.log" 2>&1; echo "prefill peers rc=$? ($(el))"
  grep -E "^prefill" "$OUT/peers.log"
fi
