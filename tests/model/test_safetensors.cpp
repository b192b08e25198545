// safetensors reader: round trips through the writer, every malformed-header case (each asserting on
// the message), and random corruption of headers (must never crash; any accepted header must still
// describe disjoint ranges inside the buffer).
#include <cstring>
#include <random>

#include "model/safetensors.h"
#include "model_test_util.h"

namespace mk {
namespace {

using test::TempDir;

// [u64 length][header][data]
std::string image(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x11');
}

Expected<SafetensorsHeader> parse(const std::string& img) {
  // A heap copy of exactly img.size() bytes, so that any over-read is a real out-of-bounds access.
  std::vector<uint8_t> buf(img.begin(), img.end());
  return parse_safetensors_header(buf.data(), buf.size(), "test.safetensors");
}

std::string parse_error(const std::string& header, size_t data_bytes) {
  auto h = parse(image(header, data_bytes));
  EXPECT_FALSE(h.ok()) << header;
  return h.ok() ? std::string() : h.message();
}

TEST(Safetensors, RoundTripMixedDtypes) {
  TempDir dir;
  std::mt19937 rng(7);
  std::vector<uint16_t> a(3 * 5), b(7);
  std::vector<float> c(2 * 3 * 4);
  for (auto& x : a) x = uint16_t(rng());
  for (auto& x : b) x = uint16_t(rng());
  for (auto& x : c) x = float(rng()) / 7.f;
  std::vector<TensorToWrite> t = {{"a", "BF16", {3, 5}, a.data(), a.size() * 2},
                                  {"b.bias", "F16", {7}, b.data(), b.size() * 2},
                                  {"c", "F32", {2, 3, 4}, c.data(), c.size() * 4},
                                  {"empty", "F32", {0, 4}, nullptr, 0}};
  ASSERT_TRUE(write_safetensors(dir / "x.safetensors", t, {{"format", "pt"}}).ok());
  auto f = open_safetensors(dir / "x.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  const auto& ts = f->header.tensors;
  ASSERT_EQ(ts.size(), 4u);
  EXPECT_EQ(f->header.metadata.at("format"), "pt");
  EXPECT_EQ(f->header.data_start % 8, 0u);
  EXPECT_EQ(*ts.at("a").dtype, DType::BF16);
  EXPECT_EQ(*ts.at("b.bias").dtype, DType::F16);
  EXPECT_EQ(*ts.at("c").dtype, DType::F32);
  EXPECT_EQ(ts.at("c").shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(std::memcmp(ts.at("a").data, a.data(), a.size() * 2), 0);
  EXPECT_EQ(std::memcmp(ts.at("b.bias").data, b.data(), b.size() * 2), 0);
  EXPECT_EQ(std::memcmp(ts.at("c").data, c.data(), c.size() * 4), 0);
  EXPECT_EQ(ts.at("empty").nbytes, 0u);
  // No copy: the data points into the mapping.
  const uint8_t* p = static_cast<const uint8_t*>(ts.at("c").data);
  EXPECT_GE(p, f->file->data());
  EXPECT_LT(p, f->file->data() + f->file->size());
}

TEST(Safetensors, MissingFile) {
  auto f = open_safetensors("/nonexistent/dir/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), "/nonexistent/dir/model.safetensors");
  EXPECT_HAS(f.message(), "cannot open");
}

TEST(Safetensors, TooShort) {
  TempDir dir;
  test::write_text(dir / "s.safetensors", "abc");
  auto f = open_safetensors(dir / "s.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), "s.safetensors");
  EXPECT_HAS(f.message(), "too short");
  test::write_text(dir / "e.safetensors", "");
  auto e = open_safetensors(dir / "e.safetensors");
  ASSERT_FALSE(e.ok());
  EXPECT_HAS(e.message(), "0 bytes");
}

TEST(Safetensors, TruncatedData) {
  TempDir dir;
  std::vector<float> v(64, 1.f);
  ASSERT_TRUE(write_safetensors(dir / "t.safetensors", {{"w", "F32", {8, 8}, v.data(), 256}}).ok());
  const auto full = test::read_text(dir / "t.safetensors");
  test::write_text(dir / "t.safetensors", full.substr(0, full.size() - 5));
  auto f = open_safetensors(dir / "t.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), "t.safetensors");
  EXPECT_HAS(f.message(), "tensor 'w'");
  EXPECT_HAS(f.message(), "truncated");
  // Cut inside the header: the length field now reaches past the end.
  test::write_text(dir / "t.safetensors", full.substr(0, 20));
  auto g = open_safetensors(dir / "t.safetensors");
  ASSERT_FALSE(g.ok());
  EXPECT_HAS(g.message(), "header length");
  EXPECT_HAS(g.message(), "past the end of the file");
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  std::string img = image("{}", 0);
  img[5] = 1;  // length 2^40 + 2
  auto h = parse(img);
  ASSERT_FALSE(h.ok());
  EXPECT_HAS(h.message(), "test.safetensors: header length 1099511627778");
  EXPECT_HAS(h.message(), "past the end of the file (10 bytes");
}

TEST(Safetensors, HeaderLengthOverCap) {
  TempDir dir;
  const uint64_t n = SAFETENSORS_MAX_HEADER + 1;
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char((n >> (8 * i)) & 0xff);
  test::write_text(dir / "big.safetensors", head);
  std::filesystem::resize_file(dir / "big.safetensors", n + 64);  // sparse: no disk used
  auto f = open_safetensors(dir / "big.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), "exceeds the limit");
}

TEST(Safetensors, MalformedJson) {
  EXPECT_HAS(parse_error("{\"a\": {\"dtype\": \"F32\",", 0), "not valid JSON");
  EXPECT_HAS(parse_error("[1, 2]", 0), "must be a JSON object, got array");
  EXPECT_HAS(parse_error("{\"a\": 3}", 0), "tensor 'a': entry must be an object");
  EXPECT_HAS(parse_error(std::string("{\"a\"\0:1}", 8), 0), "not valid JSON");
}

TEST(Safetensors, BadDtype) {
  auto m = parse_error(R"({"layer.w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_HAS(m, "tensor 'layer.w'");
  EXPECT_HAS(m, "unknown dtype 'Q4_K'");
  EXPECT_HAS(parse_error(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8), "'dtype'");
  // A known dtype the weights cannot have parses (it may be an unused buffer); binding rejects it.
  auto h = parse(image(R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16));
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_FALSE(h->tensors.at("ids").dtype.has_value());
  EXPECT_EQ(h->tensors.at("ids").dtype_name, "I64");
}

TEST(Safetensors, ShapeByteRangeMismatch) {
  auto m = parse_error(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
  EXPECT_HAS(m, "tensor 'w'");
  EXPECT_HAS(m, "[2,3]");
  EXPECT_HAS(m, "needs 24 bytes");
  EXPECT_HAS(m, "span 20");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
             "non-negative");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 8]}})", 8),
             "non-negative integers");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", 16),
             "'shape'");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "BF16", "shape": [4611686018427387904, 4],
                               "data_offsets": [0, 8]}})", 8), "too many");
}

TEST(Safetensors, OffsetsOutOfRange) {
  auto m = parse_error(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})", 24);
  EXPECT_HAS(m, "tensor 'w'");
  EXPECT_HAS(m, "data_offsets [16, 32]");
  EXPECT_HAS(m, "past the end of the data section (24 bytes");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8),
             "begin > end");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 8),
             "'data_offsets' must be [begin, end]");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8),
             "'data_offsets' must be [begin, end]");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [1]}})", 8), "got nothing");
  EXPECT_HAS(parse_error(R"({"w": {"dtype": "F32", "shape": [1],
                               "data_offsets": [18446744073709551612, 18446744073709551616]}})", 8),
             "data_offsets");
}

TEST(Safetensors, OverlappingTensors) {
  auto m = parse_error(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24);
  EXPECT_HAS(m, "'a' [");
  EXPECT_HAS(m, "'b' [");
  EXPECT_HAS(m, "overlap");
  // Same range twice also overlaps; adjacent ranges and empty tensors do not.
  EXPECT_HAS(parse_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}})", 8),
             "overlap");
  auto ok = parse(image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                            "b": {"dtype": "BF16", "shape": [4], "data_offsets": [8, 16]}})", 16));
  EXPECT_TRUE(ok.ok()) << ok.message();
}

TEST(Safetensors, MetadataTolerated) {
  auto h = parse(image(R"({"__metadata__": {"format": "pt", "n": 3, "x": null},
                           "w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4));
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->metadata.size(), 1u);
  auto h2 = parse(image(R"({"__metadata__": [1, 2]})", 0));
  EXPECT_TRUE(h2.ok()) << h2.message();
}

// Invariants of any header the parser accepts.
void check_accepted(const SafetensorsHeader& h, size_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> r;
  for (const auto& [name, t] : h.tensors) {
    ASSERT_LE(h.data_start, t.offset);
    ASSERT_LE(t.offset + t.nbytes, size) << name;
    if (t.nbytes) r.push_back({t.offset, t.offset + t.nbytes});
  }
  std::sort(r.begin(), r.end());
  for (size_t i = 1; i < r.size(); ++i) ASSERT_LE(r[i - 1].second, r[i].first);
}

TEST(Safetensors, FuzzCorruptedHeaders) {
  std::vector<uint16_t> a(6 * 5, 1);
  std::vector<float> b(11, 2.f);
  const std::string valid = safetensors_header_bytes(
      {{"model.a.weight", "BF16", {6, 5}, nullptr, 60}, {"b", "F32", {11}, nullptr, 44}},
      {{"format", "pt"}}) + std::string(104, '\x22');
  ASSERT_TRUE(parse(valid).ok());
  std::mt19937_64 rng(12345);
  const std::string alphabet = "{}[]\":,0123456789-.eE \\ntrufalsBF16F32I64shapedtypedata_offsets";
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string img = valid;
    const int n_mut = 1 + int(rng() % 4);
    for (int k = 0; k < n_mut; ++k) {
      const size_t pos = rng() % img.size();
      switch (rng() % 6) {
        case 0: img[pos] = char(rng()); break;                                // random byte
        case 1: img[pos] = alphabet[rng() % alphabet.size()]; break;          // JSON-ish byte
        case 2: img.resize(pos); break;                                       // truncate
        case 3: img.insert(pos, 1, alphabet[rng() % alphabet.size()]); break; // insert
        case 4: img.erase(pos, 1 + rng() % 8); break;                         // delete
        case 5: img[rng() % 8] = char(rng()); break;                          // length field
      }
      if (img.empty()) img = "x";
    }
    auto h = parse(img);
    if (h.ok()) {
      ++accepted;
      check_accepted(*h, img.size());
    } else {
      ASSERT_FALSE(h.message().empty());
      ASSERT_EQ(h.message().rfind("test.safetensors: ", 0), 0u) << h.message();
    }
  }
  // Some mutations (e.g. in padding or metadata values) leave a valid file: both paths are exercised.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, 4000);
}

}  // namespace
}  // namespace mk
