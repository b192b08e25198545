// TokenizerTextStream: the engine's TextStream over the tokenizer's StreamDecoder (UTF-8 safe; special
// tokens such as <|eot_id|> skipped by default so they never reach the user's text).
#pragma once
#include "megakernel/engine.h"
#include "megakernel/tokenizer.h"

namespace mk {

class TokenizerTextStream final : public TextStream {
 public:
  explicit TokenizerTextStream(const Tokenizer& tok, bool skip_special = true) : dec_(tok, skip_special) {}
  std::string push(int32_t id) override { return dec_.push(id); }
  std::string flush() override { return dec_.flush(); }

 private:
  StreamDecoder dec_;
};

}  // namespace mk
