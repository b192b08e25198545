#!/usr/bin/env bash
# One verification round on the GPU machine from carried binaries (default .carry/lead): all GPU tests, the
# golden models end to end on each backend (greedy ids must equal the CPU reference's), then `megakernel bench`
# with both backends in one process (Llama-3.2-1B at contexts 32/4096/16384, Llama-3.1-8B at 32), the
# megakernel's own benchmark (timestamps), and, when .carry/attn exists, the attention round
# (bench/attention_run.sh prefill ablation quick peers); with TORCH_PEERS set, bench/compare_torch.py against the
# same bench.json. Logs under $OUT; summary last.
set -u
export MK_REQUIRE_GPU=1  # a missing GPU here is a failure, not a skip
B=${1:-.carry/lead}
OUT=${OUT:-./lead_round_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout 240 "$B/test_gpu" > "$OUT/test_gpu.log" 2>&1; echo "test_gpu exit $?" >> "$OUT/summary.txt"
grep -E "^\[  FAILED  \]|^\[  PASSED  \]" "$OUT/test_gpu.log" | head -20 >> "$OUT/summary.txt"
bash scripts/golden_e2e.sh "$B" layered megakernel >> "$OUT/summary.txt"
timeout 150 "$B/megakernel" bench --shape llama-3.2-1b --backend all --context 32 --context 4096 --context 16384 \
  --json > "$OUT/bench.json" 2> "$OUT/bench.txt"
echo "bench 1b exit $?" >> "$OUT/summary.txt"
timeout 60 "$B/megakernel" bench --shape llama-3.1-8b --backend all --no-ceilings --prefill 32 --context 32 --repeats 3 \
  --json > "$OUT/bench8b.json" 2> "$OUT/bench8b.txt"
echo "bench 8b exit $?" >> "$OUT/summary.txt"
if [ -n "${TORCH_PEERS:-}" ]; then  # e.g. TORCH_PEERS=gptfast,hfcompile PEER_LIMITS=gptfast=75,hfcompile=90
  PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --ours "$OUT/bench.json" --shapes llama-3.2-1b --modes "$TORCH_PEERS" \
    --limits "${PEER_LIMITS:-gptfast=75,eager=25,hfcompile=90}" --reps 3 --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
  echo "torch peers exit $?" >> "$OUT/summary.txt"
fi
if [ -z "${SKIP_MK_DECODE:-}" ]; then  # the megakernel's own benchmark (timestamps, ring variants)
  timeout 90 "$B/megakernel_decode" llama-3.2-1b > "$OUT/mk_decode.txt" 2>&1
  echo "megakernel_decode exit $?" >> "$OUT/summary.txt"
fi
if [ -x .carry/attn/attn_test ]; then
  OUT="$OUT/attn" ATTN_DEADLINE=100 ATTN_TESTS='AttentionPrefill*:AttentionSanitize.PrefillSmall' \
    ATTN_SANITIZE='AttentionSanitize.PrefillSmall' bash bench/attention_run.sh prefill ablation quick peers > "$OUT/attn.txt" 2>&1
  echo "attention round exit $?" >> "$OUT/summary.txt"
elif [ -x .carry/attn/attn_bench ]; then  # benchmark only: test_gpu above holds the attention tests
  timeout 60 .carry/attn/attn_bench prefill ablation quick > "$OUT/attn_bench.log" 2>&1
  echo "attention bench exit $?" >> "$OUT/summary.txt"
  PYTHONUNBUFFERED=1 timeout 45 python3 bench/attention_peers.py "$OUT/attn_bench.log" > "$OUT/attn.txt" 2>&1
  echo "attention peers exit $?" >> "$OUT/summary.txt"
  grep -v RESULT "$OUT/attn_bench.log" | grep -v "table" >> "$OUT/attn.txt"
fi
cat "$OUT/bench.txt" "$OUT/bench8b.txt" "$OUT"/mk_decode.txt 2>/dev/null
[ -f "$OUT/peers.log" ] && grep -vE "^\s*(File|\^|return|raise)" "$OUT/peers.log" | tail -12
[ -f "$OUT/attn.txt" ] && grep -E "rc=|TFLOP|ratio|vs" "$OUT/attn.txt" | tail -60
echo "================ summary ================"
cat "$OUT/summary.txt"
