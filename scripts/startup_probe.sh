#!/usr/bin/env bash
# Where `megakernel generate` spends its start-up on the GPU machine: a random-weight checkpoint of SHAPE written by
# tools/make_random_checkpoint.py, then `generate -n 8 -v` twice per GPU backend (the second with the file in the
# page cache either way); prints the start-up lines and each run's wall time. Usage: scripts/startup_probe.sh BIN_DIR
# [SHAPE]
set -u
B=$1; SHAPE=${2:-llama-3.2-1b}
CKPT=${CKPT:-/tmp/$SHAPE-random}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_random_checkpoint.py "$SHAPE" "$CKPT" > /dev/null || exit 1
du -sh "$CKPT"
for be in layered megakernel; do
  for rep in 1 2; do
    t0=$(date +%s%N)
    line=$(LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}" timeout 120 "$B/megakernel" generate --model "$CKPT" \
      --prompt-ids 1000,2000,3000,4000 -n 8 --ids --device cuda --backend $be -v 2>&1 | grep "start-up")
    t1=$(date +%s%N)
    echo "$SHAPE $be run $rep: wall $(( (t1 - t0) / 1000000 )) ms | $line"
  done
done
