#!/usr/bin/env bash
# One device round for the layered prefill (session 11, pf): the prefill tests, the golden models end to end,
# `megakernel bench` prefill lines of a base and a new build in ABBA order (1B; 8B in AB order last), the new build
# with eager prefill launches (MK_PREFILL_GRAPHS=0), the launch probe (bench/prefill_launch.cpp: host enqueue vs GPU
# time per launch mode, first-call costs), and the engine's first token and start-up lines (`generate -v`, random 1B
# checkpoint, one process per prompt: each length's first prefill after the warm-up's 2-token one).
# Usage: scripts/prefill_round.sh NEW_DIR BASE_DIR   (NEW_DIR: megakernel, test_gpu, prefill_launch, lib/; BASE_DIR:
# megakernel, lib/)
set -u
N=$1; BASE=$2; OUT=${OUT:-./prefill_round_out}; mkdir -p "$OUT"
export MK_REQUIRE_GPU=1
CKPT=/tmp/llama-3.2-1b-random
( [ -f "$CKPT/model.safetensors" ] || python3 tools/make_random_checkpoint.py llama-3.2-1b "$CKPT" > "$OUT/ckpt.log" 2>&1 ) &
ckpt_pid=$!
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
LD_LIBRARY_PATH="$N/lib" timeout 90 "$N/test_gpu" --gtest_filter='Backend*:MegakernelPrefill*:SampleLast*:Ops.*' > "$OUT/test_gpu.log" 2>&1
echo "test_gpu exit $?"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|tests ran" "$OUT/test_gpu.log"
LD_LIBRARY_PATH="$N/lib" bash scripts/golden_e2e.sh "$N" layered megakernel > "$OUT/golden.txt" 2>&1
echo "golden: $(grep -c ': same' "$OUT/golden.txt") same; $(grep DIFF "$OUT/golden.txt" | cut -c1-60 | tr '\n' ';')"
bench() {  # bench BIN SHAPE TAG [ENV...]
  local bin=$1 shape=$2 tag=$3; shift 3
  local lines
  lines=$(env "$@" LD_LIBRARY_PATH="$bin/lib" timeout 60 "$bin/megakernel" bench --shape "$shape" --backend layered \
    --no-ceilings --prefill 2 --prefill 8 --prefill 32 --prefill 128 --prefill 1024 --context 32 --tokens 16 \
    --repeats 5 2>&1 | tee -a "$OUT/bench_$tag.txt")
  echo "$shape $tag: prefill $(echo "$lines" | grep -E '^ +prefill' | awk '{printf "%s ", $4}')| decode $(echo "$lines" | grep -m1 'decode ctx' | awk '{for(i=1;i<=NF;i++) if($i=="median") print $(i+1)}')"
}
bench "$BASE" llama-3.2-1b base1; bench "$N" llama-3.2-1b new1; bench "$N" llama-3.2-1b new2; bench "$BASE" llama-3.2-1b base2
bench "$N" llama-3.2-1b eager MK_PREFILL_GRAPHS=0
LD_LIBRARY_PATH="$N/lib" timeout 45 "$N/prefill_launch" llama-3.2-1b 2>&1 | tee "$OUT/probe.txt"
wait $ckpt_pid
for n in 2 9 32 200; do
  ids=$(python3 -c "import random; random.seed(3); print(','.join(str(random.randrange(1000, 100000)) for _ in range($n)))")
  for b in "$BASE" "$N" "$BASE" "$N"; do
    line=$(LD_LIBRARY_PATH="$b/lib" timeout 60 "$b/megakernel" generate --model "$CKPT" --prompt-ids "$ids" -n 16 \
      --ignore-eos --ids --device cuda --backend layered -v 2>&1 | grep -E "start-up|first token" | tr '\n' ' ')
    echo "engine prompt $n $(basename "$b"): $line"
  done
done
bench "$BASE" llama-3.1-8b base8; bench "$N" llama-3.1-8b new8
