#!/usr/bin/env bash
# The product path end to end on the GPU machine: `megakernel generate` (engine: prefill, sampling, stop checks,
# streaming) on a random-weight Llama-3.2-1B checkpoint written by tools/make_random_checkpoint.py, greedy (or the
# sampling flags in GEN_ARGS, e.g. GEN_ARGS="--temp 0.8 --top-p 0.9"), a 32-token prompt, 256 new tokens, each
# backend; the engine's own timing line (-v) per run. Usage:
#   bash bench/engine_run.sh BIN_DIR [BIN_DIR ...]   (each folder holds a `megakernel` binary and its lib/)
set -u
CKPT=${CKPT:-/tmp/llama-3.2-1b-random}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_random_checkpoint.py llama-3.2-1b "$CKPT" || exit 1
ids=$(python3 -c "import random; random.seed(3); print(','.join(str(random.randrange(1000, 100000)) for _ in range(32)))")
for B in "$@"; do
  for be in layered megakernel; do
    for rep in 1 2; do
      line=$(LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}" timeout 60 "$B/megakernel" generate --model "$CKPT" \
        --prompt-ids "$ids" -n 256 --ignore-eos --ids --device cuda --backend $be ${GEN_ARGS:-} -v 2>&1 | grep "ms/token" | tail -1)
      echo "$B $be ${GEN_ARGS:-greedy} run $rep: $line"
    done
  done
done
