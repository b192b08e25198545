// BPE: loading the model from tokenizer.json and encoding pieces. Mirrors tokenizers'
// models/bpe/model.rs (merge_word, tokenize_with_cache) and word.rs (merge_all).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mk::tok {

size_t StringHash::operator()(std::string_view s) const noexcept {
  // 8 bytes at a time, multiply-xorshift mixing: fast for the short strings the tokenizer hashes.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  }
  h ^= h >> 32;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 29;
  return static_cast<size_t>(h);
}

namespace {
// Per-thread cache of encoded pieces: piece -> [offset, count) in a pool of ids. One model at a time per
// thread (a different model clears it); cleared when full. Pieces of 256 bytes or more are not cached.
struct PieceCache {
  static constexpr size_t MAX_ENTRIES = 1 << 18;
  static constexpr size_t MAX_PIECE = 256;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> map;
  std::vector<int32_t> pool;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    map.clear();
    pool.clear();
  }
};

PieceCache& piece_cache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner != owner || cache.map.size() >= PieceCache::MAX_ENTRIES) cache.reset(owner);
  return cache;
}

// A candidate merge of the symbol at `pos` with its right neighbour. Ordered for a min-heap on
// (rank, pos), as in tokenizers.
struct Candidate {
  int32_t rank, pos, new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

std::string byte_fallback_token(uint8_t b) {
  static const char* HEX = "0123456789ABCDEF";
  std::string s = "<0x00>";
  s[3] = HEX[b >> 4];
  s[4] = HEX[b & 15];
  return s;
}

}  // namespace

void Bpe::merge_symbols(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2 || merges_.empty()) return;
  // Doubly linked list over the symbols; a merged-away symbol is marked dead.
  std::vector<int32_t> prev(n), next(n);  // [n] neighbour positions, -1 at the ends
  std::vector<uint8_t> alive(n, 1);       // [n]
  std::vector<Candidate> heap;
  heap.reserve(n);
  auto find = [&](int32_t a, int32_t b) {
    auto it = merges_.find(uint64_t(uint32_t(a)) << 32 | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n)
      if (const Merge* m = find(ids[i], ids[i + 1])) heap.push_back({m->rank, i, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  auto push = [&](Candidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t pos = top.pos, right = next[pos];
    if (!alive[pos] || right < 0) continue;
    // A stale candidate: the pair at pos changed since it was queued (a grown pair has a new id).
    const Merge* m = find(ids[pos], ids[right]);
    if (!m || m->new_id != top.new_id) continue;
    ids[pos] = top.new_id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    if (prev[pos] >= 0)
      if (const Merge* l = find(ids[prev[pos]], ids[pos])) push({l->rank, prev[pos], l->new_id});
    if (next[pos] >= 0)
      if (const Merge* r = find(ids[pos], ids[next[pos]])) push({r->rank, pos, r->new_id});
  }
  int32_t k = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i]) ids[k++] = ids[i];
  ids.resize(k);
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  // tokenizers' merge_word: one symbol per character, unknown characters as byte-fallback tokens, the
  // unk token (fused or not), or dropped when the model has neither.
  int32_t unk_pending = -1;  // an unk symbol not yet added
  std::string s;
  for (size_t i = 0; i < word.size();) {
    int len = 0;
    utf8_decode(word.data() + i, len);
    const bool first = i == 0, last = i + len >= word.size();
    s.clear();
    if (!first) s += prefix_;
    s.append(word.substr(i, len));
    if (last) s += suffix_;
    auto it = vocab_.find(std::string_view(s));
    if (it != vocab_.end()) {
      if (unk_pending >= 0) ids.push_back(unk_pending), unk_pending = -1;
      ids.push_back(it->second);
    } else {
      bool handled = false;
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char b : s) {
          auto bt = vocab_.find(byte_fallback_token(b));
          if (bt == vocab_.end()) break;
          bytes.push_back(bt->second);
        }
        if (bytes.size() == s.size()) ids.insert(ids.end(), bytes.begin(), bytes.end()), handled = true;
      }
      if (!handled && unk_id_ >= 0) {
        if (unk_pending >= 0 && !fuse_unk_) ids.push_back(unk_pending);
        unk_pending = unk_id_;
      }
    }
    i += static_cast<size_t>(len);
  }
  if (unk_pending >= 0) ids.push_back(unk_pending);
}

void Bpe::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  if (fast_bytes_) {
    if (ignore_merges_) {
      auto it = raw_vocab_.find(piece);
      if (it != raw_vocab_.end()) return out.push_back(it->second);
    }
    bool all_known = true;
    ids.reserve(piece.size());
    for (unsigned char b : piece) {
      ids.push_back(byte_ids_[b]);
      all_known &= byte_ids_[b] >= 0;
    }
    if (!all_known) {  // some byte's character is not in the vocabulary: take the general path
      ids.clear();
      std::string mapped;
      byte_level_encode(mapped, piece);
      initial_symbols(mapped, ids);
    }
  } else {
    std::string mapped;
    std::string_view word = piece;
    if (byte_level_) {
      byte_level_encode(mapped, piece);
      word = mapped;
    }
    if (ignore_merges_) {
      auto it = vocab_.find(word);
      if (it != vocab_.end()) return out.push_back(it->second);
    }
    initial_symbols(word, ids);
  }
  merge_symbols(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() >= PieceCache::MAX_PIECE) return encode_uncached(piece, out);
  PieceCache& cache = piece_cache(instance_);
  auto it = cache.map.find(piece);
  if (it != cache.map.end()) {
    const int32_t* p = cache.pool.data() + it->second.first;
    out.insert(out.end(), p, p + it->second.second);
    return;
  }
  const size_t start = out.size();
  encode_uncached(piece, out);
  cache.map.emplace(std::string(piece), std::make_pair(uint32_t(cache.pool.size()), uint32_t(out.size() - start)));
  cache.pool.insert(cache.pool.end(), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
}

}  // namespace mk::tok
