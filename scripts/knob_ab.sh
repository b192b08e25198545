#!/usr/bin/env bash
# A/B of run-time knobs (environment variables) of the layered path on the GPU machine, from carried binaries:
#   scripts/knob_ab.sh BIN_DIR 'name:VAR=v,VAR=v' 'name2:...' ...   ('base:' = the defaults)
# Pass 1: per config, `megakernel bench` 1B with ceilings and matvec probes (split-K and read rows) and decode at
# ctx 32. Pass 2: decode 1B ctx 32 again in reverse order (ABBA against drift). Pass 3 (KNOB_8B=1): 8B ctx 32 in
# both orders. Logs under $OUT; a table of the figures last.
set -u
B=$1; shift
OUT=${OUT:-./knob_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
run() {  # run NAME SPEC LOG ARGS...
  local name=$1 spec=$2 log=$3; shift 3
  local envs=(); IFS=',' read -ra kv <<< "${spec#*:}"
  for e in "${kv[@]}"; do [ -n "$e" ] && envs+=("$e"); done
  { echo "=== $log"; env "${envs[@]}" timeout 60 "$B/megakernel" bench --backend layered --prefill 32 --context 32 "$@" 2>&1; } >> "$OUT/$name.txt"
}
for c in "$@"; do n=${c%%:*}; run "$n" "$c" p1 --shape llama-3.2-1b --repeats 5; done
rev=(); for c in "$@"; do rev=("$c" "${rev[@]}"); done
for c in "${rev[@]}"; do n=${c%%:*}; run "$n" "$c" p2 --shape llama-3.2-1b --repeats 5 --no-ceilings; done
if [ -n "${KNOB_8B:-}" ]; then
  for c in "$@" "${rev[@]}"; do n=${c%%:*}; run "$n" "$c" p3 --shape llama-3.1-8b --repeats 3 --no-ceilings; done
fi
echo "================ knob table (us per matvec in a PDL graph; decode median ms/token) ================"
for c in "$@"; do
  n=${c%%:*}
  f="$OUT/$n.txt"
  mv=$(grep -E "^matvec (splitk|read) " "$f" | awk '{printf "%s%s=%s ", substr($2,1,1), $3, $(NF-4)}')
  d1=$(awk '/^=== p[12]$/{on=1} /^=== p3$/{on=0} on && /decode ctx/{for(i=1;i<=NF;i++) if($i=="median") printf "%s ", $(i+1)}' "$f")
  d8=$(awk '/^=== p3$/{on=1} /^=== p[12]$/{on=0} on && /decode ctx/{for(i=1;i<=NF;i++) if($i=="median") printf "%s ", $(i+1)}' "$f")
  echo "$n | 1B $d1| 8B $d8| $mv"
  grep -m1 "^read ceiling" "$f"
done
