#!/usr/bin/env bash
# Builds the attention test and benchmark binaries into .carry/attn/ (small, self-contained: only the attention
# objects, the read-ceiling probe, mk_core's dtype and the CPU reference), so they can travel to the GPU machine
# without the whole tree. Used by bench/attention_run.sh (prefill) and bench/attention_decode_run.sh (decode).
# Usage: bench/attention_build.sh [build-dir]   (default build-attn; configured with cmake -G Ninja)
#   ATTN_CARRY: output folder (default .carry/attn). A compile-time variant for an A/B call: configure a second
#   build dir with -DCMAKE_CUDA_FLAGS=-D<switch>, then ATTN_CARRY=.carry/attnB bench/attention_build.sh <that dir>
#   (then bench/attention_settle.sh on both folders). Cheaper for switches of the Hopper prefill kernel only:
#   ATTN_DEFINES="-D<switch>=<v> ..." ATTN_CARRY=.carry/attnB bench/attention_build.sh recompiles just
#   prefill_hopper_d64/d128 with those defines (the build's own compile command plus them) and links the rest
#   from the build dir.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-attn}
export PATH=$PATH:/usr/local/cuda/bin
objs=(CMakeFiles/mk_cpu.dir/src/cpu/attention_ref.cpp.o CMakeFiles/mk_core.dir/src/core/dtype.cpp.o)
for f in src/cuda/attention/*.cu src/cuda/common/read_ceiling.cu src/cuda/common/bench_timing.cu; do objs+=("CMakeFiles/mk_cuda.dir/$f.o"); done
ninja -C "$B" -j2 "${objs[@]}"
C=${ATTN_CARRY:-.carry/attn}
mkdir -p "$C"
grep -qxF '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++20 -O2 -Isrc -Iinclude -diag-suppress 2810"
full=(); for o in "${objs[@]}"; do full+=("$B/$o"); done
if [ -n "${ATTN_DEFINES:-}" ]; then  # variant objects of the Hopper prefill instances
  mkdir -p "$C/obj"
  for i in "${!objs[@]}"; do
    case "${objs[i]}" in *prefill_hopper_d*.cu.o) ;; *) continue ;; esac
    out="$PWD/$C/obj/$(basename "${objs[i]}")"
    src=${objs[i]#CMakeFiles/mk_cuda.dir/}; src=${src%.o}
    cmd=$(python3 -c 'import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("/" + sys.argv[2]):
        a = shlex.split(e["command"])
        a[a.index("-o") + 1] = sys.argv[3]
        print(shlex.join(a + shlex.split(sys.argv[4])))' "$B/compile_commands.json" "$src" "$out" "$ATTN_DEFINES")
    [ -n "$cmd" ] || { echo "no compile command for $src in $B" >&2; exit 1; }
    (cd "$B" && eval "$cmd")
    full[i]=$out
  done
fi
$NV -o "$C/attn_test" tests/gpu/test_attention.cu tests/gpu/test_attention_decode.cu "${full[@]}" \
  -lgtest -lgtest_main -lpthread
$NV -DMK_HAVE_CUDA=1 -x cu -c -o "$C/attn_bench.o" bench/attention.cpp
$NV -o "$C/attn_bench" "$C/attn_bench.o" "${full[@]}"
rm -rf "$C/attn_bench.o" "$C/obj"
strip "$C/attn_test" "$C/attn_bench"
ls -la "$C"
