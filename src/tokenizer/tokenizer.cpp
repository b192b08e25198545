// mk::Tokenizer: encode (tokenizers' TokenizerImpl::encode without special tokens added) and decode.
#include "megakernel/tokenizer.h"

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace mk {

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  tok::Pieces pieces;
  pre_tokenizer.run(text, pieces);
  for (std::string_view piece : pieces.list) model.encode_piece(piece, out);
}

void Tokenizer::Impl::encode_segment(std::string_view segment, std::vector<int32_t>& out) const {
  std::string normalized_text;
  std::string_view text = segment;
  if (!normalizer.empty()) {
    normalized_text = normalizer.apply(segment);
    text = normalized_text;
  }
  if (normalized_matcher.empty()) return encode_normalized(text, out);
  std::vector<tok::Segment> segments;
  normalized_matcher.split(text, segments);
  for (const tok::Segment& s : segments) {
    if (s.id >= 0) out.push_back(s.id);
    else encode_normalized(text.substr(s.begin, s.end - s.begin), out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::string sanitized;
  if (!tok::utf8_is_valid(text)) {  // the documented rule: each maximal invalid subsequence -> U+FFFD
    sanitized = tok::utf8_sanitize(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (impl_->raw_matcher.empty()) {
    impl_->encode_segment(text, ids);
    return ids;
  }
  std::vector<tok::Segment> segments;
  impl_->raw_matcher.split(text, segments);
  for (const tok::Segment& s : segments) {
    if (s.id >= 0) ids.push_back(s.id);
    else impl_->encode_segment(text.substr(s.begin, s.end - s.begin), ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& im = *impl_;
  std::string out;
  if (im.decoder == DecoderKind::None) {  // tokenizers joins the token strings with spaces
    bool first = true;
    for (int32_t id : ids) {
      if (!im.emits(id, skip_special)) continue;
      if (!first) out.push_back(' ');
      out += im.text_of[static_cast<size_t>(id)];
      first = false;
    }
    return out;
  }
  std::string bytes;
  for (int32_t id : ids)
    if (im.emits(id, skip_special)) bytes += im.bytes_of[static_cast<size_t>(id)];
  out.reserve(bytes.size());
  tok::utf8_append_sanitized(out, bytes, true);
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  return impl_->emits(id, false) ? impl_->text_of[static_cast<size_t>(id)] : std::string();
}

std::string Tokenizer::token_bytes(int32_t id) const {
  return impl_->emits(id, false) ? impl_->bytes_of[static_cast<size_t>(id)] : std::string();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  auto a = impl_->added_ids.find(token_text);
  if (a != impl_->added_ids.end()) return a->second;
  auto v = impl_->model.vocab().find(token_text);
  if (v != impl_->model.vocab().end()) return v->second;
  return std::nullopt;
}

int32_t Tokenizer::vocab_size() const { return impl_->n_vocab; }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->n_vocab && impl_->special[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos; }

}  // namespace mk
