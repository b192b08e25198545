#!/usr/bin/env bash
# On-device sampling on the GPU machine: its tests (ops and backend, memcheck on the op), greedy decode speed (the
# finish kernel now also draws), and `megakernel generate` with a temperature on a random 1B checkpoint for each
# build given (a build without on-device sampling draws on the host). Usage: scripts/sample_round.sh NEW_BIN [OLD_BIN]
set -u
B=$1; OLD=${2:-}
OUT=${OUT:-./sample_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
MK_REQUIRE_GPU=1 timeout 120 "$B/test_gpu" --gtest_filter='Sample*:Backend*:BackendDecodeVariants*' > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$OUT/tests.log" | head -8
timeout 90 compute-sanitizer --tool memcheck "$B/test_gpu" --gtest_filter='Sample*' > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -3
timeout 60 "$B/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings --prefill 32 --context 32 --repeats 5 \
  2>&1 | grep "decode ctx"
CKPT=${CKPT:-/tmp/llama-3.2-1b-random}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_random_checkpoint.py llama-3.2-1b "$CKPT" > /dev/null || exit 1
ids=$(python3 -c "import random; random.seed(3); print(','.join(str(random.randrange(1000, 100000)) for _ in range(32)))")
for bin in $OLD $B; do
  for args in "--temp 1.0 --seed 7" "--temp 0.7 --min-p 0.05 --seed 7" ""; do
    line=$(LD_LIBRARY_PATH="$bin/lib" timeout 60 "$bin/megakernel" generate --model "$CKPT" --prompt-ids "$ids" -n 256 \
      --ignore-eos --ids --device cuda $args -v 2>&1 | grep "ms/token" | tail -1)
    echo "$bin [${args:-greedy}]: $line"
  done
done
