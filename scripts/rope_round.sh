#!/usr/bin/env bash
# RoPE in the decode attention (CudaBackendOptions::rope_in_attention): its tests (bit-equality with the RoPE kernel
# path, the decode tests, the backends against the CPU incl. the Qwen3 golden model), memcheck and racecheck, then
# decode speed with and without it in one process per shape. Usage: scripts/rope_round.sh BIN_DIR
set -u
B=$1; OUT=${OUT:-./rope_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}"
MK_REQUIRE_GPU=1 timeout ${TEST_S:-150} "$B/test_gpu" --gtest_filter="${TESTS:-AttentionDecodeRope*:AttentionDecode.*:Backend*:Ops*:MatvecQkNorm*}" > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$OUT/tests.log" | head -8
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool "$B/test_gpu" --gtest_filter='AttentionDecodeRope.EqualsRopeKernelThenAttention' > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | head -1)"
done
for s in qwen3-0.6b qwen3-1.7b; do
  timeout 90 "$B/megakernel" bench --shape $s --backend layered --no-ceilings --prefill 32 --context 32 --repeats 5 \
    --variants rope-matvec,graph+pdl,rope-matvec 2>&1 | grep -E "weights|decode ctx"
done
for s in llama-3.2-1b llama-3.1-8b; do
  timeout 120 "$B/megakernel" bench --shape $s --backend layered --no-ceilings --prefill 32 --context 32 --repeats 5 \
    --variants rope-attn,graph+pdl,rope-attn 2>&1 | grep -E "weights|decode ctx"
done
