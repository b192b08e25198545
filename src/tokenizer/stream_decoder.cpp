// StreamDecoder: incremental decode that holds back the bytes of an incomplete UTF-8 character.
#include "megakernel/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace mk {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const Tokenizer::Impl& im = *tokenizer_.impl_;
  if (!im.emits(id, skip_special_)) return {};
  std::string out;
  if (im.decoder == DecoderKind::None) {  // token strings joined by spaces: always whole characters
    if (started_) out.push_back(' ');
    started_ = true;
    out += im.text_of[static_cast<size_t>(id)];
    return out;
  }
  pending_ += im.bytes_of[static_cast<size_t>(id)];
  const size_t held = tok::utf8_append_sanitized(out, pending_, false);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::utf8_append_sanitized(out, pending_, true);
  pending_.clear();
  started_ = false;
  return out;
}

}  // namespace mk
