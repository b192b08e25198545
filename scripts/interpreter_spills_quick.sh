#!/usr/bin/env bash
# The greedy flag instance of the megakernel (megakernel_kernel<1 1 0 0 0>, what every greedy decode benchmark runs)
# alone, through scripts/interpreter_size.sh: its SASS size and spill stores in ~10 s, where that script alone compiles
# every instance (~3 minutes). Run it after each change to src/megakernel/device before packing a build for the GPU:
# a change that makes this instance spill costs every step (bench/RESULTS.md session 25 calls 1-2: 254 B of spills, +11% per step). HEAD: 0 B.
# Usage: scripts/interpreter_spills_quick.sh [ARGS]   (needs nvcc; run from anywhere). ARGS: the instance's template
# arguments, default "true, true, false, false" (the SPLIT one: "true, true, false, false, true").
set -euo pipefail
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# interpreter.cu with its launcher's instance choice replaced by the one instance, so nvcc instantiates only that.
python3 - src/megakernel/device/interpreter.cu "$TMP/one.cu" "${1:-true, true, false, false}" <<'PY'
import sys
s = open(sys.argv[1]).read()
i = s.index('  auto pick = [&](auto stop_tag)')
j = s.index('  cudaError_t e = cudaFuncSetAttribute(kernel')
one = '  const void* kernel = reinterpret_cast<const void*>(megakernel_kernel<' + sys.argv[3] + '>);\n'
open(sys.argv[2], 'w').write(s[:i] + one + '  (void)stop; (void)sample;\n' + s[j:])
PY
MK_INTERPRETER_SRC="$TMP/one.cu" scripts/interpreter_size.sh "$TMP/one.cubin"
