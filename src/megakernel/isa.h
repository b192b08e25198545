// The megakernel's instruction set: fixed-size records shared by the host (schedule.cpp, sim.cpp) and
// the device interpreter (device/interpreter.cu). Opcodes are defined here and nowhere else.
//
// One decode step of a model is a set of fused instructions, each owning a slice of output rows:
//
//   per layer l:
//     QkvProj     rows of [q | k | v] (q_dim + 2 kv_dim)  x = resid_in(l); rmsnorm(attn_norm); matvec rows
//                                                        (+ Qwen2 bias) -> qkv[l]; also materialises
//                                                        resid[l][aux_begin, aux_end)
//     AttnPartial (kv head g, kv chunk c)                q/k norm (Qwen3) + RoPE of the group's q heads and of
//                                                        k; the instruction whose chunk holds pos appends K,V
//                                                        to the cache; partial softmax over the chunk ->
//                                                        att_part[l][g][c]           (only when split)
//     AttnOProj   (kv head g, rows of n_embd)            merges att_part[l][g][*] (or, not split, computes
//                                                        the group's attention inline) and multiplies by the
//                                                        group's columns of wo: split-K partial
//                                                        o_part[l][g][rows]   (the O projection fused into
//                                                        attention: no separate dependency point)
//     MlpGateUp   rows of n_ff                           x = resid[l] + sum_g o_part[l][g]; rmsnorm(mlp_norm);
//                                                        act[l][rows] = silu(gate x) * up x; also
//                                                        materialises resid_mid[l][aux_begin, aux_end) = x
//     MlpDown     rows of n_embd                         down[l][0][rows] = w_down[rows] . act[l]
//   or, with ScheduleOptions::fuse_down, instead of MlpGateUp + MlpDown (one dependency point fewer):
//     MlpGateUpDown rows of n_ff, part p                 act rows as MlpGateUp, then the split-K partial
//                                                        down[l][p] = w_down[:, rows] . act[rows]  (n_embd)
//                                                        (flags + mid_resid: added to resid[l + 1]'s
//                                                        accumulator instead, with its resid_mid slice)
//   LmHead        rows of n_vocab                        x = final residual; rmsnorm(final_norm);
//                                                        logits[rows]; per-slice argmax -> amax[slice]
//   SamplePartial ids [row_begin, row_end) of n_vocab,   a sampled launch only (SampleParams::temperature > 0):
//                 whole SAMPLE_TILEs                     m = the best of amax[*]; the range's weight sum
//                                                        exp((l - m) / T) in double (and its last kept id) ->
//                                                        sample_part[chunk]; a greedy launch skips it
//   Argmax        one instruction                        reduces amax[*] -> tokens[step + 1]; in a sampled launch
//                                                        it draws tokens[step + 1] by the host Sampler's rule
//                                                        instead: the range whose prefix of sample_part sums
//                                                        passes u * total, then the id inside that range
//
// The residual stream is never added in place: resid_in(l) = resid[l-1] + sum_g o_part[l-1][g] +
// sum_p down[l-1][p] (resid_in(0) = the token's embedding row) is summed by every reader in the same fixed order
// (deterministic, bit-identical for all readers), so a layer's O projection and down projection need no
// separate residual-add step. Every buffer is per layer, so within a step nothing is overwritten.
// With Layout::mid_resid the readers of resid_in(l) (QkvProj, LmHead) read resid_mid[l-1] (= resid[l-1] +
// sum_g o_part[l-1][g], materialised by MlpGateUp in the same order) + sum_p down[l-1][p]: the same bits from
// 2 + (n_down_parts - 1) vectors instead of 2 + n_kv_head + (n_down_parts - 1). With flag publishing and
// mid_resid, MlpGateUp's x is accumulated in L2 instead (Layout::mid_acc below): one dependency point after the
// last O-projection partial, where summing the partials itself cost a second one (sessions 18-24: each SM summed and
// published its slice, then polled all the slices). So resid_mid is then the accumulator's fixed-point sum, not the
// float sum of the other modes: equal within (1 + n_kv_head) * 2^-MID_ACC_FRAC, bit-identical among its readers.
// The fused MLP (MlpGateUpDown) under flags + mid_resid accumulates the next layer's input the same way
// (resid_acc below): resid_in(l + 1) = resid_mid[l] + sum_p down[l][p] is summed in L2 by its 1 + n_down_parts
// contributors -- each MlpGateUpDown's resid_mid slice (aux) and its whole down partial -- and QkvProj (l >= 1) and
// LmHead poll it: one dependency point per MLP instead of two (act, then down), where the n_down_parts partials per
// element were far too many for every reader to sum. Simulator only: the device backend refuses the fused schedule
// (H200, session 26: an MlpDown without its act wait, the bound of what fusing buys, was 0.6-1% faster, less than
// the 132 atomic adds per element would cost; bench/RESULTS.md session 26 call 2).
//
// Publishing (Layout-independent; the device's MkParams::flags and the simulator's Protocol): either
// epoch counters (below), or flag-in-data: every workspace element except logits is stored together with
// the epoch of its step as one 8-byte relaxed store (value bits, epoch), and a reader polls the pairs it
// reads until their epoch is the step's -- no counter, no fence; a consumer waits only for what it reads.
// Data that is not flagged (the K/V cache, read at later steps) is ordered by one release/acquire step
// barrier: every SM with a queue increments a step counter (release) after its last instruction of a
// step, and waits (acquire) for all of them before its first instruction of the next step.
//
// Why RoPE/q-k-norm/KV-append sit in the attention instructions and not in QkvProj: RoPE and the Qwen3
// q/k norm need whole heads, and slicing the projection by heads leaves most SMs idle (Llama-3.2-1B has
// 48 q/k/v heads for 132 SMs). Slicing by rows balances the weight bytes; the head-wise work is tiny.
//
// Dependencies: every instruction increments one counter (`signal`) after its writes, and waits before
// its reads until each listed counter reaches (epoch + 1 - lag) * count. Counters are monotonic across
// steps (epochs) and never reset: a counter that receives `count` increments per step has reached
// (e + 1) * count exactly when step e's producers are all done. 32-bit counters last 2^32 / count steps
// (> 10^7 for count <= 256); the backend zeroes them (between launches) before that.
//
// Sampled launches (SampleParams below): the draw is spread over the SMs (the SamplePartial instructions each read a
// range of the logits, Argmax the partial sums and one range again; before session 20 one SM read and weighed all
// 128k logits: ~124 us per step at Llama 3's vocabulary). Counter protocol: SamplePartial's wait for all LmHead
// instructions orders the plain logits stores before its reads, Argmax's for all SamplePartials before its reads of
// sample_part and (transitively) logits; Argmax waits for the LmHeads too, which is all a greedy launch needs (its
// SamplePartials only signal). Flag protocol: logits are not flagged in a greedy launch (only the host reads them,
// after the launch); in a sampled launch LmHead stores them flagged like every other element (8-byte pairs at the
// same offsets) and the draw polls them.
//
// Tokens: tokens[s] is the input token of step s of a launch (s = 0 written by the host); Argmax of
// step s writes tokens[s + 1], and layer 0's QkvProj of step s waits for the previous step's Argmax
// (lag 1), so K steps can run in one launch.
#pragma once
#include <cmath>
#include <cstdint>

namespace mk::megakernel {

enum class Op : uint8_t {
  Nop = 0,
  QkvProj,      // RMSNorm + Q/K/V projection rows (+ bias); materialises a slice of resid[l]
  AttnPartial,  // q/k norm + RoPE + KV append + partial attention of one kv group over one KV chunk
  AttnOProj,    // attention merge (or inline attention) + split-K O projection of one group, rows slice
  MlpGateUp,    // residual reduction + RMSNorm + gate/up rows + SiLU
  MlpDown,      // down projection rows
  LmHead,       // final RMSNorm + LM-head rows + slice argmax
  Argmax,       // reduction of the slice argmaxes -> next token
  MlpGateUpDown,  // MlpGateUp + split-K down projection of its rows (fused MLP)
  SamplePartial,  // a sampled launch's weight sum over one range of the vocabulary
  Count
};

const char* op_name(Op op);

constexpr int MAX_WAITS = 4;

// Ids per tile of the sampled draw (a warp's 32 lanes x 4 ids); SamplePartial ranges are whole tiles.
constexpr int SAMPLE_TILE = 128;

// Wait until counters[counter] >= (epoch + 1 - lag) * count. lag = 1 waits for the previous step.
struct Wait {
  uint32_t counter = 0;
  uint16_t count = 0;
  uint8_t lag = 0;
  uint8_t pad = 0;
};
static_assert(sizeof(Wait) == 8);

// Flags of an instruction.
enum InstrFlag : uint16_t {
  FLAG_APPEND_KV = 1,  // this attention instruction writes K/V of the current position to the cache
};

struct Instr {
  Op op = Op::Nop;
  uint8_t n_waits = 0;
  uint16_t layer = 0;
  uint16_t group = 0;       // kv head (attention ops)
  uint16_t chunk = 0;       // kv chunk (AttnPartial); slice index (LmHead); part (MlpGateUpDown, SamplePartial)
  uint32_t row_begin = 0;   // output rows [row_begin, row_end) of the op's output vector
  uint32_t row_end = 0;
  uint32_t aux_begin = 0;   // QkvProj: resid[l] rows it materialises; MlpGateUp(Down): resid_mid[l] rows;
                            // LmHead (fuse_down): the rows of resid_acc whose words it clears
  uint32_t aux_end = 0;
  uint32_t signal = 0;      // counter incremented (by 1) after the instruction's writes
  uint16_t flags = 0;
  uint16_t pad = 0;
  Wait waits[MAX_WAITS];
};
static_assert(sizeof(Instr) == 64, "Instr is read by the device as 4 x 16-byte vectors");

#if defined(__CUDACC__)
#define MK_ISA_HD __host__ __device__
#else
#define MK_ISA_HD
#endif

// Where every activation lives in the fp32 workspace (offsets and strides in floats). Built by the
// schedule; the device and the simulator index with exactly these.
struct Layout {
  int n_layer = 0, n_embd = 0, n_ff = 0, n_vocab = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0, group = 0;  // group = n_head / n_kv_head
  int qkv_dim = 0;       // q_dim + 2 * kv_dim
  int n_chunks = 0;      // KV chunks per kv head; 1 = attention inline in AttnOProj (no AttnPartial)
  int chunk_len = 0;     // positions per KV chunk (n_chunks * chunk_len >= max_context)
  int chunk_dynamic = 0; // 1: a chunk's positions follow the step's pos (attn_chunk_range), not its rows
  int max_context = 0;
  int n_lm_slices = 0;   // LmHead instructions (= entries of amax)
  int n_down_parts = 1;  // partial vectors per layer in `down`: 1, or one per MlpGateUpDown
  int att_part_stride = 0;  // floats per (g, c) partial: group * (head_dim + 2)
  // offsets (floats) into the workspace:
  int64_t resid = 0;     // [n_layer][n_embd]          resid[l] = input residual of layer l (QkvProj's aux slices)
  int64_t qkv = 0;       // [n_layer][qkv_dim]         raw projections (bias added, no RoPE)
  int64_t att_part = 0;  // [n_layer][n_kv_head][n_chunks][group][head_dim + 2]  (o unnormalised, max, sum)
  int64_t o_part = 0;    // [n_layer][n_kv_head][n_embd]  split-K O-projection partials
  int64_t act = 0;       // [n_layer][n_ff]
  int64_t down = 0;      // [n_layer][n_down_parts][n_embd]
  int64_t resid_mid = 0; // [n_layer][n_embd]          resid[l] + sum_g o_part[l][g] (MlpGateUp's aux slices)
  int mid_resid = 0;     // 1: resid_in(l) readers use resid_mid[l-1] (see above); the buffer is always written
  int64_t mid_acc = 0;   // [2][acc_slots][n_embd] 8-byte words (flag protocol + mid_resid): mid_acc_word below
  int acc_slots = 0;     // accumulated vectors per parity: n_layer (resid_mid[l] in slot l), with the fused MLP
                         // 2 n_layer (resid_in(l + 1) in slot n_layer + l: resid_acc below)
  int64_t logits = 0;    // [n_vocab]
  int64_t amax = 0;      // [n_lm_slices][2]  (max value, index as float: exact below 2^24)
  int64_t sample_part = 0;  // [n_sample_parts][4]  (the range's weight sum as a double: low and high 32 bits; its
                            //                      last kept id as float, -1 for none; the max m it used)
  int n_sample_parts = 0;   // SamplePartial instructions; part k holds ids [k, k + 1) * sample_part_tiles * SAMPLE_TILE
  int sample_part_tiles = 0;
  static int sample_parts(int n_vocab, int part_tiles) {  // n_sample_parts for ranges of part_tiles tiles
    const int64_t ids = int64_t(part_tiles) * SAMPLE_TILE;
    return int((n_vocab + ids - 1) / ids);
  }
  MK_ISA_HD void sample_part_range(int k, int& r0, int& r1) const {
    const int ids = sample_part_tiles * SAMPLE_TILE;
    r0 = k * ids, r1 = n_vocab - r0 < ids ? n_vocab : r0 + ids;
  }
  // Dynamic LM head (version 10; ScheduleOptions::lm_unit_rows > 0, the device's MkParams::lm_dynamic): the vocabulary
  // in units of lm_unit_rows rows (the last may be shorter; the device's ring page); LmHead slice ch first takes
  // the static units ch * lm_static + k (k < lm_static, unit < lm_units), then claims the units from
  // n_lm_slices * lm_static on one at a time from a monotonic claim counter until a claim falls past the last
  // unit; every LmHead instruction makes exactly one such overshooting claim, so a step advances the counter by
  // exactly lm_claims_per_step() and step e's claims are [e * that, (e + 1) * that). Its amax entry is the best
  // of the rows it computed ((-inf, n_vocab) for none); Argmax breaks value ties by the smaller index.
  int lm_unit_rows = 0;  // 0: static slices (the instruction's rows)
  int lm_units = 0;      // ceil(n_vocab / lm_unit_rows)
  int lm_static = 0;     // static units per slice
  MK_ISA_HD int lm_dynamic_units() const { return lm_units > n_lm_slices * lm_static ? lm_units - n_lm_slices * lm_static : 0; }
  MK_ISA_HD int lm_claims_per_step() const { return lm_dynamic_units() + n_lm_slices; }
  int64_t workspace_floats = 0;
  // counters:
  int n_counters = 0;
};

// The mid-layer residual accumulator (flag protocol + mid_resid; device/ops/norm_matvec.cuh and mlp.cuh, the simulator's State::acc_*).
// resid_mid[l] = resid[l] + sum_g o_part[l][g] is summed in L2 by its 1 + n_kv_head contributors -- QkvProj's slice
// of resid[l], each AttnOProj's rows of its group's partial -- with one relaxed atomic add each of mid_acc_word(v)
// to word i of mid_acc[epoch & 1][l]: the value in fixed point with MID_ACC_FRAC fraction bits above 8 bits that
// count the contributions. Integer adds commute, so the sum is the same whatever order they land in (deterministic),
// and a reader polls a word until its count is 1 + n_kv_head -- the flag in the data, as the epoch of a pair. Every
// element gets exactly one contribution per contributor stage (the slices partition the rows), and MlpGateUp zeroes
// its aux slice of the other parity's words -- step - 1's, whose readers the step barrier ordered before this step --
// for step + 1, whose adds the next step barrier orders after the zeroing. Values are clamped to +-MID_ACC_MAX per
// contribution, so 255 contributions stay inside the 56-bit sum.
// resid_acc (the fused MLP): slot n_layer + l holds resid_in(l + 1), whose 1 + n_down_parts contributors are the
// MlpGateUpDown instructions of layer l (each its resid_mid slice and its down partial), whose readers are QkvProj of
// layer l + 1 or, for the last layer, LmHead; each reader zeroes its aux slice of the other parity's words, as
// MlpGateUp does for resid_mid. The schedule keeps 1 + n_down_parts <= 255.
MK_ISA_HD inline bool resid_acc(const Layout& L) { return L.acc_slots > L.n_layer; }
MK_ISA_HD inline int resid_acc_slot(const Layout& L, int l) { return L.n_layer + l; }  // resid_in(l + 1)
// Offset (in 8-byte words of the flagged workspace) of slot `slot`'s words at the step of epoch e.
MK_ISA_HD inline int64_t acc_offset(const Layout& L, uint32_t e, int slot) {
  return L.mid_acc + (int64_t(e & 1u) * L.acc_slots + slot) * L.n_embd;
}
constexpr int MID_ACC_FRAC = 28;
constexpr float MID_ACC_MAX = 524288.f;  // 2^19: 2^47 units, x 255 < 2^55
static_assert(MID_ACC_FRAC == 28, "mid_acc_word / mid_acc_value scale by 2^28");
MK_ISA_HD inline unsigned long long mid_acc_word(float v) {
#if defined(__CUDA_ARCH__)
  const long long f = __float2ll_rn(fminf(fmaxf(v, -MID_ACC_MAX), MID_ACC_MAX) * 0x1p28f);
#else
  const long long f = std::llrint(std::fmin(std::fmax(v, -MID_ACC_MAX), MID_ACC_MAX) * 0x1p28f);
#endif
  return (static_cast<unsigned long long>(f) << 8) + 1ull;
}
MK_ISA_HD inline unsigned mid_acc_count(unsigned long long w) { return unsigned(w & 0xffu); }
MK_ISA_HD inline float mid_acc_value(unsigned long long w) {  // the sum's fixed-point value as a float
  const long long f = static_cast<long long>(w) >> 8;
#if defined(__CUDA_ARCH__)
  return __ll2float_rn(f) * 0x1p-28f;
#else
  return static_cast<float>(f) * 0x1p-28f;
#endif
}

// Positions [p0, p1) that AttnPartial's chunk attends to at step position pos (both the device and the
// simulator clip them to [0, pos]; the chunk whose range holds pos appends this step's k/v). Static
// chunks: the instruction's rows. Dynamic (Layout::chunk_dynamic): the pos + 1 cached positions split
// evenly over the n_chunks -- every chunk's SM gets a like share whatever max_context
// is (static chunks of max_context / n_chunks leave the SMs of chunks past pos idle). Exactly one chunk
// holds pos, since n_chunks * len >= pos + 1.
MK_ISA_HD inline void attn_chunk_range(const Layout& L, int row_begin, int row_end, int chunk, int pos, int& p0,
                                       int& p1) {
  if (!L.chunk_dynamic) {
    p0 = row_begin, p1 = row_end;
    return;
  }
  const int len = (pos + L.n_chunks) / L.n_chunks;  // ceil((pos + 1) / n_chunks)
  p0 = chunk * len, p1 = p0 + len;
}

// Sampling of one launch (the device's MkParams::sample, the simulator's launch argument). temperature 0: greedy
// (argmax, the default). Otherwise step s of the launch draws its next token by the host Sampler's rule
// (runtime/sampler.h: candidates (l - max finite l) / temperature, min-p, weights exp in double walked in id
// order) with u = philox_uniform(seed, first_draw + s): the tokens a host loop of forward + Sampler chooses.
struct SampleParams {
  float temperature = 0.f;
  float min_p = 0.f;       // 0 = off
  uint64_t seed = 0;
  uint64_t first_draw = 0; // draw index of step 0 of the launch
};

// Stop ids of one launch (issue 5; the device's MkParams::stop, the simulator's launch argument; n = 0: none, every
// step runs). When the token a step chooses is one of them, the launch's later steps do not run: the K/V cache then
// holds exactly the positions that were fed (the stop token itself is not fed), the counters, step barrier and claim
// counter stand as after a launch of that many steps, and the launch reports the tokens it produced, the stop token
// last. Every SM decides the same way at the start of each step s >= 1, before its first instruction of the step, from
// the step's input token tokens[s] (device/interpreter.cu says where exactly and why it costs no extra round trip).
// Ids outside the vocabulary are allowed and never match.
constexpr int MAX_STOP_IDS = 16;
struct StopIds {
  int32_t n = 0;
  int32_t ids[MAX_STOP_IDS] = {};
  MK_ISA_HD bool has(int32_t t) const {
    for (int i = 0; i < n; ++i)
      if (ids[i] == t) return true;
    return false;
  }
};

// Per-step parameters of one launch step.
struct StepParams {
  uint32_t epoch = 0;  // step index since the counters were created; never reset
  int32_t pos = 0;     // position of this step's token
};

}  // namespace mk::megakernel
