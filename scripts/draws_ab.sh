#!/usr/bin/env bash
# Decode speed of carried builds with the device draws, in mirrored order (builds in order, then reversed): `megakernel
# bench` 1B ctx 32, layered, greedy plus the top-k 40 and top-p 0.9 variants; with LONG_CTX (e.g. 4096,16384) also
# greedy at those contexts in the same process order; VARIANTS replaces the variant list. Usage: [LONG_CTX=C,...]
# [VARIANTS=V,...] scripts/draws_ab.sh BIN_1 BIN_2 ...
set -u
rev=(); for b in "$@"; do rev=("$b" "${rev[@]}"); done
for b in "$@" "${rev[@]}"; do
  echo "== $b"
  LD_LIBRARY_PATH="$b/lib" timeout 60 "$b/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings \
    --prefill 32 --context 32 --repeats 3 --variants "${VARIANTS:-topk40,topp0.9}" 2>&1 | grep -E "decode ctx|prefill|error|rror:"
  if [ -n "${LONG_CTX:-}" ]; then
    ctx=(); for c in ${LONG_CTX//,/ }; do ctx+=(--context "$c"); done
    LD_LIBRARY_PATH="$b/lib" timeout 90 "$b/megakernel" bench --shape llama-3.2-1b --backend layered --no-ceilings \
      --prefill 32 "${ctx[@]}" --repeats 3 2>&1 | grep -E "graph\+pdl +median|error|rror:"
  fi
done
