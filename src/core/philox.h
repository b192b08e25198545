// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator. Output = bijection(counter, key), so draw i of seed s is computable anywhere (CPU or GPU)
// without carrying state. The sampler uses key = seed, counter = {draw index lo, hi, 0, 0}.
// Host and device code alike (the CUDA backend's on-device sampler draws the same numbers as the host Sampler;
// std::array's members are constexpr, callable on the device with --expt-relaxed-constexpr).
#pragma once
#include <array>
#include <cstdint>

#if defined(__CUDACC__)
#define MK_PHILOX_HD __host__ __device__
#else
#define MK_PHILOX_HD
#endif

namespace mk {

using Philox4x32 = std::array<uint32_t, 4>;

MK_PHILOX_HD inline Philox4x32 philox4x32_10(Philox4x32 ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += W0;
      key[1] += W1;
    }
    const uint64_t p0 = uint64_t(M0) * ctr[0];
    const uint64_t p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
  }
  return ctr;
}

// Uniform double in [0, 1) for draw `index` of `seed`: the top 53 bits of words 0 and 1 of the block.
MK_PHILOX_HD inline double philox_uniform(uint64_t seed, uint64_t index) {
  const Philox4x32 r = philox4x32_10({uint32_t(index), uint32_t(index >> 32), 0u, 0u},
                                     {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t bits = (uint64_t(r[0]) << 32) | r[1];
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace mk
