#!/usr/bin/env bash
# One binary, an environment knob off (A) and on (B), separate processes in ABBA order: the matvec probe (PDL graph,
# split-K vs a read-only kernel) and decode 1B / 8B. Usage: scripts/knob_env_ab.sh BIN_DIR VAR=VALUE [SHAPES]
# Logs under $OUT; a table last.
set -u
BIN=$1; KNOB=$2; SHAPES=${3:-8192x2048,2048x8192,16384x2048,3072x2048,2048x2048}
OUT=${OUT:-./knob_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
run() {  # run TAG ON(0/1)
  local envs=(); [ "$2" = 1 ] && envs=("$KNOB")
  { env "${envs[@]}" timeout 60 "$BIN/matvec_bench" --kernels splitk-early,read --shapes "$SHAPES" --no-ceiling
    env "${envs[@]}" timeout 90 "$BIN/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings \
      --prefill 32 --context 32 --repeats 5
    env "${envs[@]}" timeout 90 "$BIN/megakernel" bench --shape llama-3.1-8b --backend layered --no-ceilings \
      --prefill 32 --context 32 --repeats 3; } > "$OUT/$1.txt" 2>&1
}
run A1 0; run B1 1; run B2 1; run A2 0
echo "================ $KNOB: B = on | matvec graph us (split-K, read) per shape | decode 1B, 8B ms/token ================"
for t in A1 B1 B2 A2; do
  f="$OUT/$t.txt"
  mv=$(grep -E "^(splitk-early|read) " "$f" | awk '{for(i=1;i<=NF;i++) if($i=="graph") printf "%s:%s=%s ", substr($1,1,1), $2, $(i+1)}')
  d=$(grep "decode ctx" "$f" | awk '{for(i=1;i<=NF;i++) if($i=="median") printf "%s ", $(i+1)}')
  echo "$t | $mv| $d"
done
