#!/usr/bin/env bash
# Same-machine comparison of carried builds of the layered path: scripts/ab_bins.sh BIN_1 BIN_2 [BIN_3 ...]
# Pass 1: `megakernel bench` 1B with ceilings and matvec probes, each build. Pass 2: decode 1B ctx 32, builds in
# order then reversed. Pass 3 (unless AB_NO_8B is set): the same for 8B (--no-ceilings). Logs under $OUT (one file
# per build); a table last.
set -u
OUT=${OUT:-./ab_out}; mkdir -p "$OUT"
run() {  # run BIN TAG ARGS...
  local bin=$1 tag=$2; shift 2
  { echo "=== $tag"; LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}" timeout 60 "$bin/megakernel" bench --backend layered \
      --prefill 32 --context 32 "$@" 2>&1; } >> "$OUT/$(basename "$bin").txt"
}
rev=(); for b in "$@"; do rev=("$b" "${rev[@]}"); done
for b in "$@"; do run "$b" p1 --shape llama-3.2-1b --repeats 5; done
for b in "$@" "${rev[@]}"; do run "$b" p2 --shape llama-3.2-1b --repeats 5 --no-ceilings; done
if [ -z "${AB_NO_8B:-}" ]; then
  for b in "$@" "${rev[@]}"; do run "$b" p3 --shape llama-3.1-8b --repeats 3 --no-ceilings; done
fi
echo "================ A/B table (us per matvec in a PDL graph; decode median ms/token) ================"
for bin in "$@"; do
  f="$OUT/$(basename "$bin").txt"
  mv=$(grep -E "^matvec (splitk|read) " "$f" | awk '{printf "%s%s=%s ", substr($2,1,1), $3, $(NF-4)}')
  d1=$(awk '/^=== p[12]$/{on=1} /^=== p3$/{on=0} on && /decode ctx/{for(i=1;i<=NF;i++) if($i=="median") printf "%s ", $(i+1)}' "$f")
  d8=$(awk '/^=== p3$/{on=1} /^=== p[12]$/{on=0} on && /decode ctx/{for(i=1;i<=NF;i++) if($i=="median") printf "%s ", $(i+1)}' "$f")
  echo "$(basename "$bin") | 1B $d1| 8B $d8| $mv"
  grep -m1 "^read ceiling" "$f"
done
