// The engine with the EOS check on the device (Backend::max_stop_ids / decode_*_until, issue 5) on the fake backend:
// ids, text, stop reason and the cache equal the host loop's, greedy and sampled (the Sampler advances by the draws
// the device took); the EOS ids (config + extra_eos_ids) reach the device; calls of 256 tokens when nobody streams and
// no stop string is set, 16 otherwise; more EOS ids than the backend checks: the host check as before.
#include <gtest/gtest.h>

#include <map>

#include "fake_backend.h"
#include "megakernel/engine.h"

namespace mk {
namespace {

using testing::FakeBackend;
using testing::hash_next;
using testing::MapTextStream;


struct Outcome {
  GenerateResult r;
  std::vector<int32_t> cache;
  std::vector<int> sizes, produced;
};

// mode 0: the host loop (no device decoding); 1: device decoding, host stop check; 2: device decoding + device stops.
Outcome generate_with(int mode, bool sampled, const std::vector<int32_t>& eos, const std::vector<int32_t>& extra, int max_new,
        bool stream, const std::vector<std::string>& stops = {}) {
  const int V = 61;
  FakeBackend be(V, 1024, [&](const std::vector<int32_t>& s) { return hash_next(s, V); });
  be.device_greedy = mode > 0 && !sampled;
  be.device_sample = mode > 0 && sampled;
  be.device_stop = mode == 2;
  be.config_.eos_token_ids = eos;
  Engine eng(be);
  std::map<int32_t, std::string> pieces;
  for (int i = 0; i < V; ++i) pieces[i] = std::string(1, char('a' + i % 26));
  MapTextStream text(pieces);
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.extra_eos_ids = extra;
  o.stop_strings = stops;
  if (sampled) o.sampling.temperature = 3.f, o.sampling.seed = 99;
  StreamCallback cb;
  if (stream) cb = [](std::string_view, std::span<const int32_t>) { return true; };
  auto r = eng.generate(std::vector<int32_t>{2, 7, 1}, o, &text, cb);
  EXPECT_TRUE(r) << r.message();
  EXPECT_EQ(be.seq, eng.cached_ids()) << "the backend's cache must hold exactly the engine's cached ids";
  return Outcome{r ? *r : GenerateResult{}, be.seq, be.decode_sizes, be.produced};
}

TEST(EngineDeviceStop, EqualsHostLoopAndStopsOnTheDevice) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    // The ids of a long run without EOS: pick EOS ids that occur late (past the first call of 16) and early.
    const Outcome unstopped = generate_with(0, sampled, {}, {}, 300, false);
    ASSERT_EQ(unstopped.r.ids.size(), 300u);
    const int32_t late = unstopped.r.ids[40], early = unstopped.r.ids[3];
    for (const auto& [eos, extra] : std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>{
             {{late}, {}}, {{}, {late}}, {{1000, late}, {early}}, {{}, {}}}) {
      for (bool stream : {false, true}) {
        SCOPED_TRACE(cat("eos ", eos.size(), " extra ", extra.size(), stream ? " streamed" : ""));
        const Outcome host = generate_with(0, sampled, eos, extra, 300, stream);
        const Outcome dev = generate_with(1, sampled, eos, extra, 300, stream);
        const Outcome stop = generate_with(2, sampled, eos, extra, 300, stream);
        for (const Outcome* x : {&dev, &stop}) {
          EXPECT_EQ(x->r.ids, host.r.ids);
          EXPECT_EQ(x->r.text, host.r.text);
          EXPECT_EQ(x->r.stop, host.r.stop);
          EXPECT_EQ(x->cache, host.cache);
        }
        ASSERT_FALSE(stop.sizes.empty());
        // Unstreamed: calls of 256 (one megakernel launch); streamed: 16 per call.
        EXPECT_EQ(stop.sizes[0], stream ? 16 : 256);
        // Every id after the first came from the device, and the cache above shows the EOS was not fed.
        int sum = 0;
        for (int n : stop.produced) sum += n;
        EXPECT_EQ(sum + 1, int(stop.r.ids.size()));
        const bool has_eos = !eos.empty() || !extra.empty();
        EXPECT_EQ(host.r.stop, has_eos ? StopReason::Eos : StopReason::MaxTokens);
        if (!stream) {
          // The EOS (within the first 41 ids) ends the first call on the device; without one, 256 + 43 tokens.
          EXPECT_EQ(stop.sizes.size(), has_eos ? 1u : 2u);
          if (has_eos) {
            EXPECT_LT(stop.produced[0], 256);
          }
        }
      }
    }
  }
}

TEST(EngineDeviceStop, StopStringsKeepSmallCallsAndTheHostCheck) {
  const Outcome unstopped = generate_with(0, false, {}, {}, 120, false);
  const std::string at = unstopped.r.text.substr(50, 2);  // a stop string inside the fourth call of 16
  const size_t first = unstopped.r.text.find(at);
  ASSERT_NE(first, std::string::npos);
  const Outcome host = generate_with(0, false, {}, {}, 120, false, {at});
  const Outcome stop = generate_with(2, false, {}, {}, 120, false, {at});
  EXPECT_EQ(stop.r.ids, host.r.ids);
  EXPECT_EQ(stop.r.text, host.r.text);
  EXPECT_EQ(stop.r.stop, StopReason::StopString);
  EXPECT_EQ(stop.cache, host.cache);
  for (int n : stop.sizes) EXPECT_LE(n, 16);
}

TEST(EngineDeviceStop, MoreEosIdsThanTheDeviceChecksFallBackToTheHost) {
  std::vector<int32_t> eos;
  for (int i = 0; i < 17; ++i) eos.push_back(1000 + i);  // 17 > the fake's 16; none occurs
  const Outcome unstopped = generate_with(0, false, {}, {}, 60, false);
  eos.push_back(unstopped.r.ids[30]);
  const Outcome host = generate_with(0, false, eos, {}, 60, false);
  const Outcome stop = generate_with(2, false, eos, {}, 60, false);
  EXPECT_EQ(stop.r.ids, host.r.ids);
  EXPECT_EQ(stop.cache, host.cache);
  EXPECT_EQ(stop.r.stop, StopReason::Eos);
  for (int n : stop.sizes) EXPECT_LE(n, 16) << "without device stops the calls stay small";
}

}  // namespace
}  // namespace mk
