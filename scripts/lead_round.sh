#!/usr/bin/env bash
# One verification round on the GPU machine from carried binaries (default .carry/lead): all GPU tests, the
# golden models end to end on each backend (greedy ids must equal the CPU reference's), then the decode
# benchmarks of the layered path and the megakernel on Llama-3.2-1B shapes. Logs under $OUT; summary last.
set -u
export MK_REQUIRE_GPU=1  # a missing GPU here is a failure, not a skip
B=${1:-.carry/lead}
OUT=${OUT:-./lead_round_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout 150 "$B/test_gpu" > "$OUT/test_gpu.log" 2>&1; echo "test_gpu exit $?" >> "$OUT/summary.txt"
grep -E "^\[  FAILED  \]|^\[  PASSED  \]" "$OUT/test_gpu.log" | head -20 >> "$OUT/summary.txt"
for m in tests/golden/*/; do
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$m/expected.json'))['cases'][0]['prompt'])))" 2>/dev/null)
  [ -n "$ids" ] || continue
  cpu=$("$B/megakernel" generate --model "$m" --prompt-ids "$ids" -n 12 --ids --ignore-eos --device cpu 2>&1 | tail -1)
  for be in layered megakernel; do
    got=$(timeout 30 "$B/megakernel" generate --model "$m" --prompt-ids "$ids" -n 12 --ids --ignore-eos --device cuda --backend $be 2>&1 | tail -1)
    [ "$got" == "$cpu" ] && r=same || r="DIFFERENT cpu=$cpu got=$got"
    echo "e2e $(basename $m) $be: $r" >> "$OUT/summary.txt"
  done
done
timeout 120 "$B/megakernel" bench --shape llama-3.2-1b --json > "$OUT/bench.json" 2> "$OUT/bench.txt"
echo "bench exit $?" >> "$OUT/summary.txt"
timeout 90 "$B/megakernel_decode" llama-3.2-1b > "$OUT/mk_decode.txt" 2>&1
echo "megakernel_decode exit $?" >> "$OUT/summary.txt"
cat "$OUT/bench.txt" "$OUT/mk_decode.txt"
echo "================ summary ================"
cat "$OUT/summary.txt"
