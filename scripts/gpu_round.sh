#!/usr/bin/env bash
# One round on the GPU machine, build-free: the GPU tests, compute-sanitizer (memcheck on the whole test binary,
# racecheck on our kernels with shared memory; not on cuBLASLt's, whose barrier-based
# pipelines racecheck reports as hazards), `megakernel bench` on named shapes, optionally the PyTorch peers
# (bench/compare_torch.py), then a short summary table last. Logs go to $OUT (or ./gpu_round_out).
#   scripts/gpu_round.sh [BIN_DIR]         BIN_DIR holds test_gpu and megakernel (default .carry/cuda)
# Environment: SKIP_TESTS=1, SKIP_SANITIZER=1, SKIP_BENCH=1, TORCH_PEERS="eager,hfcompile,gptfast" (empty: none),
#   PEER_SHAPES (default llama-3.2-1b,llama-3.1-8b), BENCH_SHAPES (default llama-3.2-1b llama-3.1-8b qwen3-0.6b qwen3-1.7b),
#   BENCH_ARGS (extra arguments for megakernel bench), TEST_FILTER / MEMCHECK_FILTER / RACE_FILTER (gtest filters),
#   BENCH2_SHAPES + BENCH2_ARGS (a second bench run, e.g. the ablation on one shape; JSON in bench2.json).
set -u
export MK_REQUIRE_GPU=1  # a missing GPU here is a failure, not a skip
BIN=${1:-.carry/cuda}
OUT=${OUT:-./gpu_round_out}
mkdir -p "$OUT"
# cuBLASLt is linked dynamically: the toolkit's, else the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
ldd "$BIN/megakernel" | grep -i -E "cublas|not found" | tee -a "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"

if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${T_TESTS:-120} "$BIN/test_gpu" --gtest_filter="${TEST_FILTER:-*}" 2>&1 | tee "$OUT/test_gpu.log" | grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|error" | head -40
  note "test_gpu: $(grep -E '^\[  PASSED  \]' "$OUT/test_gpu.log" | head -1) $(grep -cE '^\[  FAILED  \] [A-Z]' "$OUT/test_gpu.log") failed"
fi

if [ -z "${SKIP_SANITIZER:-}" ] && [ -n "$SAN" ]; then
  timeout ${T_MEMCHECK:-150} "$SAN" --tool memcheck --leak-check no --error-exitcode 9 "$BIN/test_gpu" \
      --gtest_filter="${MEMCHECK_FILTER:-Ops*:Matvec*:Backend.RandomModels*:Backend.Prefill*:Backend.DeviceGreedy*}" > "$OUT/memcheck.log" 2>&1
  rc=$?
  note "memcheck (exit $rc): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  timeout ${T_RACE:-60} "$SAN" --tool racecheck --error-exitcode 9 "$BIN/test_gpu" \
      --gtest_filter="${RACE_FILTER:-Ops.*:Matvec.*:Backend.DeviceGreedy*:-Ops.Gemm*}" > "$OUT/racecheck.log" 2>&1
  rc=$?
  note "racecheck (exit $rc): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1)"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  shapes=""
  for s in ${BENCH_SHAPES:-llama-3.2-1b llama-3.1-8b qwen3-0.6b qwen3-1.7b}; do shapes="$shapes --shape $s"; done
  timeout ${T_BENCH:-150} "$BIN/megakernel" bench $shapes --json ${BENCH_ARGS:-} > "$OUT/bench.json" 2> "$OUT/bench.txt"
  note "bench exit $?"
  cat "$OUT/bench.txt"
  if [ -n "${BENCH2_SHAPES:-}" ]; then
    shapes=""
    for s in $BENCH2_SHAPES; do shapes="$shapes --shape $s"; done
    timeout ${T_BENCH2:-120} "$BIN/megakernel" bench $shapes --json ${BENCH2_ARGS:-} > "$OUT/bench2.json" 2> "$OUT/bench2.txt"
    note "bench2 exit $?"
    grep -E "decode ctx|prefill" "$OUT/bench2.txt"
  fi
fi

if [ -n "${TORCH_PEERS:-}" ]; then
  PYTHONUNBUFFERED=1 timeout ${T_PEERS:-420} python3 bench/compare_torch.py --ours "$OUT/bench.json" --modes "$TORCH_PEERS" \
      --shapes "${PEER_SHAPES:-llama-3.2-1b,llama-3.1-8b}" --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
  note "torch peers exit $?"
  grep -E "^[a-z0-9.-]+ +(hf|gptfast)|^model" "$OUT/peers.log"
fi

echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
grep -E "read ceiling|bf16 matmul|matvec|decode ctx|prefill" "$OUT/bench.txt" 2>/dev/null
