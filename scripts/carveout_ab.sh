#!/usr/bin/env bash
# Does a common shared-memory carveout help the layered decode chain? Each process sets MK_SMEM_CARVEOUT (percent;
# cuda/common/launch.h) for every kernel it launches; "" = the driver's choice (the default). ABBA per shape, so
# that drift between processes shows. Usage: scripts/carveout_ab.sh BIN_DIR [SHAPE ...]
set -u
B=$1; shift
SHAPES=${*:-llama-3.2-1b qwen3-0.6b llama-3.1-8b}
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}"
for s in $SHAPES; do
  for cv in "" 100 100 ""; do
    line=$(MK_SMEM_CARVEOUT=$cv timeout 90 "$B/megakernel" bench --shape $s --backend layered --no-ceilings --prefill 32 \
      --context 32 --repeats 5 2>&1 | grep "decode ctx")
    echo "$s carveout=${cv:-driver}: $line"
  done
done
