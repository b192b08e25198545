#!/usr/bin/env bash
# A short verification round on the GPU machine, for a session whose kernels changed but whose full figures are
# already known (scripts/final_round.sh is the long one): every GPU test and the golden models end to end on both GPU
# backends for the new build, memcheck on $SAN_FILTER, the decode speed of the base build against the new one in
# mirrored order (scripts/draws_ab.sh; VARIANTS and LONG_CTX pass through), and, when $ATTN_A and $ATTN_B name two
# attention builds (bench/attention_build.sh folders), bench/attention_settle.sh on them with the cuDNN peers.
# Usage: scripts/check_round.sh NEW_BIN BASE_BIN   (logs under $OUT; summary last)
set -u
export MK_REQUIRE_GPU=1
N=$1; BASE=$2
OUT=${OUT:-./check_round_out}; mkdir -p "$OUT"
S="$OUT/summary.txt"; : > "$S"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$S"
LD_LIBRARY_PATH="$N/lib" timeout "${TEST_S:-200}" "$N/test_gpu" > "$OUT/test_gpu.log" 2>&1
echo "test_gpu exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/test_gpu.log" | tr '\n' ' ')" >> "$S"
grep -E "^\[  FAILED  \]" "$OUT/test_gpu.log" | head -10 >> "$S"
LD_LIBRARY_PATH="$N/lib" bash scripts/golden_e2e.sh "$N" layered megakernel >> "$S"
LD_LIBRARY_PATH="$N/lib" timeout "${SAN_S:-120}" compute-sanitizer --tool memcheck "$N/test_gpu" \
  --gtest_filter="${SAN_FILTER:-Sample*}" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)" >> "$S"
bash scripts/draws_ab.sh "$BASE" "$N" > "$OUT/draws.txt" 2>&1
if [ -n "${ATTN_A:-}" ] && [ -n "${ATTN_B:-}" ]; then
  OUT="$OUT/attn" SETTLE_FOCUS=0 SETTLE_CLOCK=1 \
    SETTLE_TEST_0='AttentionPrefill*:AttentionSanitize.PrefillSmall:-AttentionPrefill.SimpleMatchesReference' \
    SETTLE_RACE_0=AttentionSanitize.PrefillSmall bash bench/attention_settle.sh "$ATTN_A" "$ATTN_B" > "$OUT/attn.txt" 2>&1
  echo "attention settle exit $?" >> "$S"
fi
echo "========== decode, base / new / new / base =========="; cat "$OUT/draws.txt"
[ -f "$OUT/attn.txt" ] && { echo "========== attention, $ATTN_A vs $ATTN_B (ABBA) =========="; tail -40 "$OUT/attn.txt"; }
echo "================ summary ================"; cat "$S"
