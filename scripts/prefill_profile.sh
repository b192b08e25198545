#!/usr/bin/env bash
# Where a short prefill's time goes (layered path, random 1B weights): prefill time by prompt length in one
# process, then a per-kernel GPU time profile of 32-token prefills (nsys when present, else ncu) to compare the
# kernels' GPU time with the wall time of the chain. Usage: scripts/prefill_profile.sh BIN_DIR
set -u
B=$1; OUT=${OUT:-./prefill_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}"
timeout 90 "$B/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings --prefill 2 --prefill 8 \
  --prefill 32 --prefill 128 --prefill 512 --context 32 --tokens 16 --repeats 5 2>&1 | grep -E "prefill|decode ctx"
run=("$B/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings --prefill 32 --context 32 --tokens 16 --repeats 3)
if command -v nsys > /dev/null; then
  timeout 150 nsys profile -o "$OUT/prefill" --force-overwrite true "${run[@]}" > "$OUT/nsys.log" 2>&1
  timeout 90 nsys stats --report cuda_gpu_kern_sum,cuda_api_sum --format csv "$OUT/prefill.nsys-rep" > "$OUT/nsys_stats.csv" 2>&1
  echo "nsys: $(wc -l < "$OUT/nsys_stats.csv") lines in nsys_stats.csv"
else
  echo "no nsys; ncu per kernel"
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv "${run[@]}" > "$OUT/ncu.csv" 2>&1
  echo "ncu exit $?: $(grep -c gpu__time_duration "$OUT/ncu.csv") kernels"
fi
