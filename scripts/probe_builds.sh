#!/usr/bin/env bash
# Probe builds of megakernel_decode that bound the megakernel's step (bench/RESULTS.md session 28 calls 1 and 4):
#   nowait  every flag check true (poll.cuh fresh / fresh_word, mlp.cuh acc_complete; layer 0's token clamped): each
#           poll takes its first read and goes on -- the step with no dependency point ever waiting (values wrong);
#   nocomp  the ring matvecs' dot-product loops empty (pages still waited for and released, outputs zero);
#   nwnc    both;
#   flagmid the flag instances' code for the default configuration only: flags imply the mid-layer residual, so the
#           flags-without-mid_resid paths go (greedy flag instance 238,720 -> 216,832 B of SASS, session 29) -- a
#           probe of what the per-layer code's size costs; its numbers hold for the default (flags + mid_resid) only;
#   noar    the inline-attention flag instance without attn_range (its chained online softmax, which that instance runs
#           only with attn_short off or past attn_short_max -- never in the benchmarks: 238,720 -> 195,712 B);
#   lean    flagmid and noar (238,720 -> 173,312 B: -27%).
# Each is built from the working tree with the probe's edits applied, packed as .carry/NAME.tgz (scripts/pack_bins.sh),
# and the sources restored (git checkout of the edited files: commit or stash changes to them first). Then on the GPU
# machine, e.g.: scripts/mk_ab.sh .carry/lead .carry/nowait "llama-3.2-1b 32"   (after untarring both there).
# Usage: scripts/probe_builds.sh [nowait] [nocomp] [nwnc] [flagmid] [noar] [lean]   (default: the first three; ~80 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES="src/megakernel/device/poll.cuh src/megakernel/device/ops/mlp.cuh src/megakernel/device/common.cuh src/megakernel/device/ring.cuh
  src/megakernel/device/ops/attention.cuh src/megakernel/device/ops/norm_matvec.cuh"
if ! git diff --quiet -- $FILES; then echo "probe_builds: commit or stash your changes to $FILES first" >&2; exit 1; fi
trap 'git checkout -- $FILES' EXIT
patch_probe() {  # patch_probe nowait|nocomp|flagmid: the probe's edits (each must apply exactly, else the script stops)
  python3 - "$1" <<'PY'
import sys
def sub(path, old, new, count=1):
    s = open(path).read()
    if s.count(old) != count: sys.exit(f"probe_builds: {path}: expected {count} of {old!r}")
    open(path, 'w').write(s.replace(old, new))
d = 'src/megakernel/device/'
if sys.argv[1] == 'nowait':
    sub(d + 'poll.cuh', 'bool fresh(u64 v, uint32_t e) { return uint32_t(v >> 32) == e; }', 'bool fresh(u64, uint32_t) { return true; }')
    sub(d + 'poll.cuh', 'bool fresh_word(uint32_t w, uint32_t e) { return ((w ^ e) & 0xffffu) == 0; }',
        'bool fresh_word(uint32_t, uint32_t) { return true; }')
    sub(d + 'ops/mlp.cuh', 'bool acc_complete(const Pairs4& q, uint32_t count) {\n  return', 'bool acc_complete(const Pairs4& q, uint32_t count) {\n  return true || ')
    sub(d + 'common.cuh', 'c.p.tok_embd + size_t(token) *', 'c.p.tok_embd + size_t(min(max(token, 0), L.n_vocab - 1)) *')
elif sys.argv[1] == 'flagmid':
    sub(d + 'common.cuh', '    if (L.mid_resid) sum_residual_flag(c, L.resid_mid', '    if (true) sum_residual_flag(c, L.resid_mid')
    sub(d + 'ops/attention.cuh', 'if (FLAG && L.mid_resid) red_acc', 'if (FLAG) red_acc')
    sub(d + 'ops/norm_matvec.cuh', '} else if (FLAG && L.mid_resid) {', '} else if (FLAG) {')
    sub(d + 'ops/norm_matvec.cuh', 'if (qkv && FLAG && L.mid_resid) {', 'if (qkv && FLAG) {')
elif sys.argv[1] == 'noar':
    sub(d + 'ops/attention.cuh', '  } else if (L.n_chunks == 1) {\n    attn_prepare<FLAG>', '  } else if (!INLINE && L.n_chunks == 1) {\n    attn_prepare<FLAG>')
else:  # nocomp: every ring page loop starts past its columns (the split pages' too)
    s = open(d + 'ring.cuh').read()
    n = s.count('; ch < chunks; ch +=') + s.count('; h < 2 * chunks; h +=')
    if n < 3: sys.exit('probe_builds: ring.cuh: the page loops were not found')
    s = s.replace('for (int ch = lane; ch < chunks;', 'for (int ch = lane + (1 << 20); ch < chunks;')
    s = s.replace('for (int ch = sub; ch < chunks;', 'for (int ch = sub + (1 << 20); ch < chunks;')
    s = s.replace('for (int h = lane; h < 2 * chunks;', 'for (int h = lane + (1 << 20); h < 2 * chunks;')
    s = s.replace('for (int ch = c0 + lane; ch < c1;', 'for (int ch = c1 + lane; ch < c1;')
    open(d + 'ring.cuh', 'w').write(s)
PY
}
probes=("$@")
[ ${#probes[@]} -eq 0 ] && probes=(nowait nocomp nwnc)
for n in "${probes[@]}"; do
  git checkout -- $FILES
  case $n in
    nowait) patch_probe nowait ;;
    nocomp) patch_probe nocomp ;;
    nwnc) patch_probe nowait; patch_probe nocomp ;;
    flagmid) patch_probe flagmid ;;
    noar) patch_probe noar ;;
    lean) patch_probe flagmid; patch_probe noar ;;
    *) echo "probe_builds: unknown probe $n (nowait, nocomp, nwnc, flagmid, noar, lean)" >&2; exit 1 ;;
  esac
  cmake --build build -j2 --target megakernel_decode > /dev/null
  scripts/pack_bins.sh "$n" megakernel_decode
done
git checkout -- $FILES
cmake --build build -j2 --target megakernel_decode > /dev/null  # the tree's own binary again
