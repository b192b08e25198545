#!/usr/bin/env bash
# Time to first token through `megakernel generate` (the engine's -v line) for several prompt lengths on a random
# 1B checkpoint, with CUDA's default lazy module loading and with EAGER loading, to see which first-use costs the
# start-up warm-up still leaves to the first request. Usage: scripts/ttft_probe.sh BIN_DIR [BACKEND]
# (GEN_ARGS: extra `generate` flags, e.g. GEN_ARGS='--temp 0.7 --top-p 0.9 --seed 3' for a sampled first token)
set -u
B=$1; BE=${2:-layered}
CKPT=${CKPT:-/tmp/llama-3.2-1b-random}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_random_checkpoint.py llama-3.2-1b "$CKPT" > /dev/null || exit 1
for n in 2 9 32 200; do
  ids=$(python3 -c "import random; random.seed(3); print(','.join(str(random.randrange(1000, 100000)) for _ in range($n)))")
  for load in LAZY EAGER; do
    line=$(CUDA_MODULE_LOADING=$load LD_LIBRARY_PATH="$B/lib" timeout 60 "$B/megakernel" generate --model "$CKPT" \
      --prompt-ids "$ids" -n 16 --ignore-eos --ids --device cuda --backend $BE ${GEN_ARGS:-} -v 2>&1 | grep "first token" | tail -1)
    echo "prompt $n $load: $line"
  done
done
