#!/usr/bin/env bash
# One device round of the decode-matvec probe (bench/matvec_bench.cpp): the defaults with the in-kernel timeline
# on the two shapes and two whose row pairs divide evenly over 132 SMs, then the tuning knobs.
# Usage: scripts/matvec_round.sh DIR_WITH_matvec_bench   (logs under $OUT)
set -u
B=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
run() {  # label, env..., -- args
  local label=$1; shift
  echo "=== $label" | tee -a "$OUT/matvec.log"
  env "$@" 2>&1 | tee -a "$OUT/matvec.log"
}
run defaults timeout 150 "$B/matvec_bench" --trace --kernels ${KERNELS:-splitk-early,splitk-early+bf16x,splitk,read} \
  --shapes ${SHAPES:-8192x2048,2048x8192,8448x2048,2112x8192}
for knob in ${KNOBS:-MK_MATVEC_BPS=2 MK_MATVEC_BPS=1 MK_MATVEC_LB=1}; do
  run "$knob" "$knob" timeout 60 "$B/matvec_bench" --no-ceiling --trace --kernels splitk-early,splitk-early+bf16x \
    --shapes 8192x2048,2048x8192
done
