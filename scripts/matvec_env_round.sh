#!/usr/bin/env bash
# A device round for matvec environment settings in one carried build (megakernel, test_gpu, matvec_bench, lib/):
# the matvec and small-model backend tests under every setting, compute-sanitizer memcheck / racecheck on the matvec
# tests under the last one, then the matvec probe (PDL graph, split-K with f32 and bf16 x vs a read-only kernel) and
# decode 1B / 8B, each setting its own process, in the order given (repeat settings to bracket drift, e.g. A B A).
# Usage: scripts/matvec_env_round.sh BIN SETTING...   (SETTING: "VAR=VALUE[,VAR=VALUE]" or "-" for the defaults;
# the tests run once under each distinct setting other than "-"). Environment: SHAPES, KERNELS (matvec_bench), FILTER (tests),
# SAN_SETTING, SAN_FILTER, RACE_FILTER (racecheck's, default SAN_FILTER), TEST_S / SAN_S (timeouts, s).
# Logs under $OUT (four files); a table last.
set -u
export MK_REQUIRE_GPU=1
BIN=$1; shift
OUT=${OUT:-./matvec_env_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
S="$OUT/summary.txt"; : > "$S"
envs() { [ "$1" = - ] && return; tr ',' '\n' <<< "$1"; }
with() { local s=$1; shift; mapfile -t e < <(envs "$s"); env "${e[@]}" "$@"; }
FILTER=${FILTER:-'Matvec*:Backend.RandomModels*:Backend.DeviceGreedy*'}
mapfile -t distinct < <(printf '%s\n' "$@" | grep -vx -- - | awk '!seen[$0]++')
for s in "${distinct[@]}"; do
  echo "=== tests $s" >> "$OUT/tests.log"
  with "$s" timeout ${TEST_S:-60} "$BIN/test_gpu" --gtest_filter="$FILTER" >> "$OUT/tests.log" 2>&1
  echo "tests [$s] exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/tests.log" | tail -1)" >> "$S"
done
for s in "$@"; do
  { echo "=== bench $s"
    with "$s" timeout 40 "$BIN/matvec_bench" --trace --kernels "${KERNELS:-splitk-early,splitk-early+bf16x,read}" \
      --shapes "${SHAPES:-8192x2048,2048x8192,16384x2048}"
    with "$s" timeout 40 "$BIN/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings --prefill 32 \
      --context 32 --repeats 5
    with "$s" timeout 40 "$BIN/megakernel" bench --shape llama-3.1-8b --backend layered --no-ceilings --prefill 32 \
      --context 32 --repeats 3; } >> "$OUT/bench.log" 2>&1
done
last=${SAN_SETTING:-${!#}}
for tool in memcheck racecheck; do
  echo "=== $tool $last" >> "$OUT/san.log"
  f=${SAN_FILTER:-Matvec.*:MatvecQkNorm.*}; [ $tool = racecheck ] && f=${RACE_FILTER:-$f}
  with "$last" timeout ${SAN_S:-60} compute-sanitizer --tool $tool "$BIN/test_gpu" --gtest_filter="$f" \
    >> "$OUT/san.log" 2>&1
  echo "$tool [$last] exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san.log" | tail -1)" >> "$S"
done
cat "$S"
echo "==== setting | matvec graph us (% of the ceiling) per kernel and shape | decode 1B, 8B median ms/token ===="
awk '/^=== bench /{t=substr($0,11); print "-- " t} /^read ceiling/{print "   " $0}
     /^(splitk[^ ]*|read) +[0-9]+x/{printf "   %-22s %s %s\n", $1, $2, substr($0, index($0, "graph"))}
     /decode ctx/{for(i=1;i<=NF;i++) if($i=="median") print "   decode median " $(i+1)}' "$OUT/bench.log"
