#!/usr/bin/env bash
# The megakernel's code size and spills per kernel instance, for a change to src/megakernel/device: compiles
# interpreter.cu to a cubin with the build's flags (about 3 minutes on 2 cores) and prints, per instance, its SASS
# size (the .text section) and ptxas's spill stores. Why it matters: every op's code is fetched again once per layer,
# so a change that grows the executed code can cost more than it saves (bench/RESULTS.md, session 14: the flag
# instance grown from 311 to 533 KB made every op slower). Compare the output before and after a change.
# Usage: scripts/interpreter_size.sh [OUT.cubin]   (needs nvcc; run from anywhere). MK_INTERPRETER_SRC: another source
# to compile in interpreter.cu's place (scripts/interpreter_spills_quick.sh passes a one-instance copy).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
CUBIN=${1:-/tmp/interpreter.cubin}
LOG=$(mktemp)
nvcc -DMK_HAVE_CUDA=1 -Iinclude -Isrc -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr \
  -std=c++20 -x cu -cubin -Xptxas -v "${MK_INTERPRETER_SRC:-src/megakernel/device/interpreter.cu}" -o "$CUBIN" > "$LOG" 2>&1
# megakernel_kernel<RING, FLAG, SPLIT, STOP, SAMPLE> (interpreter.cu), as 0/1 flags.
printf '%-34s %10s %14s\n' "instance <ring flag sample stop split>" "SASS bytes" "spill stores"
awk '/Compiling entry function/ { match($0, /megakernel_kernelI(Lb[01]E)+/); k = substr($0, RSTART, RLENGTH) }
     /spill stores/ && k != "" { print k, $5; k = "" }' "$LOG" | while read -r name spills; do
  hex=$(readelf -S -W "$CUBIN" 2>/dev/null | awk -v n="$name" 'index($2, ".text.") == 1 && index($2, n) { print $6 }')
  flags=$(echo "$name" | grep -o 'Lb[01]E' | tr -d 'LbE' | tr '\n' ' ')
  printf '%-34s %10d %14s\n' "<${flags% }>" "$((16#${hex:-0}))" "$spills"
done
rm -f "$LOG"
