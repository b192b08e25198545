#!/usr/bin/env bash
# Same-machine comparison of two carried builds of the megakernel: `megakernel_decode` of build A, B, B, A in separate
# processes (ABBA: the machine's drift cancels) for each "SHAPE CTX" given, then the per-op attention lines of the
# in-kernel timing report. Logs under $OUT (one file per build).
# Usage: scripts/mk_ab.sh BIN_A BIN_B "llama-3.2-1b 16384" "llama-3.1-8b 4096" ...   (BIN_*: folders holding
# megakernel_decode, and lib/ with its shared libraries when they are not installed). MK_ENV_A / MK_ENV_B: environment
# assignments for A's / B's runs (e.g. MK_ENV_B="MK_FUSE=1" with BIN_B = BIN_A compares a switch of one build).
# MK_AB_TIMEOUT: seconds per run (120): a build that hangs then costs that much device time per run, so keep it short.
# MK_AB_SAMPLE=1: each run also times the sampled launch (temperature 1; megakernel_decode MK_SAMPLE), a second
# column per build -- a change can cost the sampled instance alone (bench/RESULTS.md session 30 call 9).
set -u
A=$1; B=$2; shift 2
EA=${MK_ENV_A:-}; EB=${MK_ENV_B:-}
OUT=${OUT:-./mk_ab_out}; mkdir -p "$OUT"
label() { echo "$(basename "$1")$(echo "${2:+_$2}" | tr -c 'A-Za-z0-9_\n' _)"; }
LA=$(label "$A" "$EA"); LB=$(label "$B" "$EB")
one() {  # one BIN SHAPE CTX ENV -> "x.xxx" ms/token at 128 steps per launch (with MK_AB_SAMPLE=1: "greedy / sampled")
  env $4 LD_LIBRARY_PATH="$1/lib:${LD_LIBRARY_PATH:-}" MK_LAYERED=0 MK_CTX=$3 MK_SET=d MK_REPS=3 MK_SAMPLE=${MK_AB_SAMPLE:-0} \
    timeout "${MK_AB_TIMEOUT:-120}" "$1/megakernel_decode" "$2" 2>&1 | tee -a "$OUT/$(label "$1" "$4").log" |
    grep "128 steps" | grep -o "[0-9.]* ms/token" | cut -d' ' -f1 | paste -sd/ | sed 's|/| / |'
}
echo "shape ctx | $LA | $LB | $LB | $LA  (ms/token, 128 steps per launch$([ "${MK_AB_SAMPLE:-0}" = 1 ] && echo '; greedy / sampled'))"
for spec in "$@"; do
  set -- $spec
  echo "$1 $2 | $(one "$A" "$1" "$2" "$EA") | $(one "$B" "$1" "$2" "$EB") | $(one "$B" "$1" "$2" "$EB") | $(one "$A" "$1" "$2" "$EA")"
done
grep -h "read ceiling" "$OUT/$LA.log" | head -1
for f in "$LA" "$LB"; do echo "== $f"; grep -h "AttnPartial   prep\|AttnOProj     prep" "$OUT/$f.log"; done
