#!/usr/bin/env bash
# The golden models end to end on the GPU: for each tests/golden/*/ model, its first case's prompt, 12 greedy ids
# from the CPU reference and from each given backend; prints "e2e MODEL BACKEND: same" or the two id lists.
# Usage: scripts/golden_e2e.sh BIN_DIR BACKEND...   (e.g. layered megakernel)
set -u
B=$1; shift
for m in tests/golden/*/; do
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$m/expected.json'))['cases'][0]['prompt'])))" 2>/dev/null)
  [ -n "$ids" ] || continue
  cpu=$("$B/megakernel" generate --model "$m" --prompt-ids "$ids" -n 12 --ids --ignore-eos --device cpu 2>&1 | tail -1)
  for be in "$@"; do
    got=$(timeout 30 "$B/megakernel" generate --model "$m" --prompt-ids "$ids" -n 12 --ids --ignore-eos --device cuda --backend $be 2>&1 | tail -1)
    [ "$got" == "$cpu" ] && r=same || r="DIFFERENT cpu=$cpu got=$got"
    echo "e2e $(basename $m) $be: $r"
  done
done
