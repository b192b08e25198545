#!/usr/bin/env bash
# A device round for a matvec change: .carry/NEW (megakernel, test_gpu, matvec_bench, lib/) against .carry/BASE
# (megakernel, lib/). All GPU tests and the golden models end to end on the layered path (new build), memcheck and
# racecheck on the matvec tests, the matvec probe with its timeline, then scripts/ab_bins.sh BASE NEW.
# Usage: scripts/matvec_ab_round.sh .carry/NEW .carry/BASE   (logs under $OUT; summary last)
set -u
export MK_REQUIRE_GPU=1
N=$1; BASE=$2
OUT=${OUT:-./matvec_ab_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$N/lib:${LD_LIBRARY_PATH:-}"
S="$OUT/summary.txt"
timeout 240 "$N/test_gpu" > "$OUT/test_gpu.log" 2>&1; echo "test_gpu exit $?" >> "$S"
grep -E "^\[  FAILED  \]|^\[  PASSED  \]" "$OUT/test_gpu.log" | head -20 >> "$S"
bash scripts/golden_e2e.sh "$N" layered >> "$S"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool "$N/test_gpu" --gtest_filter='Matvec.*:MatvecQkNorm.*' \
    > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)" >> "$S"
done
timeout 120 "$N/matvec_bench" --trace --kernels splitk-early,splitk-early+bf16x,read \
  --shapes 8192x2048,2048x8192,16384x2048,3072x2048,2048x2048 > "$OUT/matvec.txt" 2>&1
echo "matvec_bench exit $?" >> "$S"
OUT="$OUT/ab" bash scripts/ab_bins.sh "$BASE" "$N" > "$OUT/ab_table.txt" 2>&1
cat "$S"; grep -vE "^    " "$OUT/matvec.txt"; cat "$OUT/ab_table.txt"
