#!/usr/bin/env bash
# A session's closing round on the GPU machine: scripts/lead_round.sh on the new build (all GPU tests, the golden
# models end to end on both GPU backends, `megakernel bench` 1B and 8B), memcheck on the tests of the session's new
# paths ($SAN_FILTER), the decode speed of the base build against the new one in ABBA processes, greedy and with the
# device draws (scripts/draws_ab.sh), and the engine's first token (scripts/ttft_probe.sh, lazy module loading),
# base then new.
# Usage: scripts/final_round.sh NEW_BIN BASE_BIN   (logs under $OUT; summary last)
set -u
N=$1; BASE=$2
OUT=${OUT:-./final_round_out}; mkdir -p "$OUT"
SKIP_MK_DECODE=1 OUT="$OUT/lead" bash scripts/lead_round.sh "$N" > "$OUT/lead.txt" 2>&1
S="$OUT/summary.txt"; : > "$S"
LD_LIBRARY_PATH="$N/lib" timeout 120 compute-sanitizer --tool memcheck "$N/test_gpu" \
  --gtest_filter="${SAN_FILTER:-SampleLast*:BackendPrefill*:Sample*}" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)" >> "$S"
bash scripts/draws_ab.sh "$BASE" "$N" > "$OUT/draws.txt" 2>&1
for b in "$BASE" "$N"; do echo "== $b"; bash scripts/ttft_probe.sh "$b" 2>&1 | grep LAZY; done > "$OUT/ttft.txt"
tail -45 "$OUT/lead.txt"
echo "========== decode, greedy and drawn, base / new / new / base =========="; cat "$OUT/draws.txt"
echo "========== first token (engine, a fresh process per prompt), base then new =========="; cat "$OUT/ttft.txt"
echo "================ summary ================"; cat "$OUT/lead/summary.txt" "$S"
