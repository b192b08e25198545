#!/usr/bin/env bash
# Where the megakernel's warps stall, per source location (GPU machine side): ncu's source counters (warp-stall
# sampling per SASS address) of one megakernel launch of `megakernel_decode`, compacted by scripts/ncu_stalls.py into
# $OUT/samples.csv (the full report is too large to come back).
# Usage: scripts/megakernel_profile.sh BIN_DIR [SHAPE] [LAUNCH_SKIP]   (env as megakernel_decode's: MK_CTX, MK_SET)
# Then, on the build machine, map the samples onto the same binary's disassembly:
#   pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump   (nvdisasm / cuobjdump, under site-packages/nvidia/cu13/bin)
#   cuobjdump -xelf interpreter.sm_90a.cubin BIN_DIR/megakernel_decode
#   readelf -s -W interpreter.sm_90a.cubin | grep FUNC        (the symbol index of the instance that ran; the flag
#                                                               instance is megakernel_kernel<true, true, false, ...>)
#   nvdisasm -gi -fun IDX interpreter.sm_90a.cubin > k.sass
#   python3 scripts/ncu_stalls.py map samples.csv k.sass --interpreter src/megakernel/device/interpreter.cu
# (the interpreter.cu of the commit the binary was built from: its dispatch lines name the ops).
set -u
B=$1; SHAPE=${2:-llama-3.2-1b}; SKIP=${3:-40}
OUT=${OUT:-./profile_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}" MK_REQUIRE_GPU=1
# Launch SKIP of a ctx-32 run is one of the one-step-per-launch decode launches (after the 32 prompt launches).
MK_LAYERED=0 MK_CTX=${MK_CTX:-32} MK_SET=${MK_SET:-d} MK_REPS=1 timeout 300 ncu --clock-control none \
  --kernel-name regex:megakernel_kernel --launch-skip "$SKIP" --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o "$OUT/prof" \
  "$B/megakernel_decode" "$SHAPE" > "$OUT/ncu_run.txt" 2>&1
echo "ncu rc $?"
timeout 180 ncu -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass > "$OUT/source.csv" 2> "$OUT/source_err.txt"
echo "source page rc $?"
python3 scripts/ncu_stalls.py compact "$OUT/source.csv" "$OUT/samples.csv"
rm -f "$OUT/source.csv" "$OUT/prof.ncu-rep"
