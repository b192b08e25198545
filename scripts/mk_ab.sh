#!/usr/bin/env bash
# Same-machine comparison of two carried builds of the megakernel: `megakernel_decode` of build A, B, B, A in separate
# processes (ABBA: the machine's drift cancels) for each "SHAPE CTX" given, then the per-op attention lines of the
# in-kernel timing report. Logs under $OUT (one file per build).
# Usage: scripts/mk_ab.sh BIN_A BIN_B "llama-3.2-1b 16384" "llama-3.1-8b 4096" ...   (BIN_*: folders holding
# megakernel_decode, and lib/ with its shared libraries when they are not installed)
set -u
A=$1; B=$2; shift 2
OUT=${OUT:-./mk_ab_out}; mkdir -p "$OUT"
one() {  # one BIN SHAPE CTX -> "x.xxx" ms/token at 128 steps per launch
  local name; name=$(basename "$1")
  LD_LIBRARY_PATH="$1/lib:${LD_LIBRARY_PATH:-}" MK_LAYERED=0 MK_CTX=$3 MK_SET=d MK_REPS=3 timeout 120 \
    "$1/megakernel_decode" "$2" 2>&1 | tee -a "$OUT/$name.log" | grep "128 steps" | grep -o "[0-9.]* ms/token" | cut -d' ' -f1
}
echo "shape ctx | $(basename "$A") | $(basename "$B") | $(basename "$B") | $(basename "$A")  (ms/token, 128 steps per launch)"
for spec in "$@"; do
  set -- $spec
  echo "$1 $2 | $(one "$A" "$1" "$2") | $(one "$B" "$1" "$2") | $(one "$B" "$1" "$2") | $(one "$A" "$1" "$2")"
done
grep -h "read ceiling" "$OUT/$(basename "$A").log" | head -1
for f in "$A" "$B"; do echo "== $(basename "$f")"; grep -h "AttnPartial   prep\|AttnOProj     prep" "$OUT/$(basename "$f").log"; done
