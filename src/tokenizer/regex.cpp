// PCRE2 wrapper. Match data and the JIT stack are thread-local: pcre2_match_data must not be shared
// between threads, and creating them per call would cost more than matching a short text.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include "tokenizer/regex_compat.h"

#include <pcre2.h>

#include <cstdint>
#include <stdexcept>

namespace mk::tok {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {
// Per-thread match state, big enough for any of our patterns (the ovector grows on demand).
struct ThreadState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadState() {
    data = pcre2_match_data_create(16, nullptr);
    // Runs of whitespace make `\s+(?!\S)` backtrack deeply: give the JIT more than its 32 KiB default.
    jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

size_t next_char(std::string_view text, size_t i) {
  ++i;
  while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
  return i;
}
}  // namespace

Expected<Regex> Regex::compile(const std::string& onig_pattern, const std::string& where) {
  const std::string pattern = onig_compatible_pattern(onig_pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code)
    return make_error(where, ": cannot compile regex ", onig_pattern, " (as PCRE2: offset ", err_offset, " of ",
                      pattern.substr(0, 200), "): ", pcre2_message(err));
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(c);
  return r;
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  ThreadState& ts = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = SIZE_MAX;  // end of the previous match
  while (pos <= text.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, ts.data, ts.context)
                        : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)  // retry with the interpreter
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, ts.data,
                       nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw std::runtime_error("tokenizer: pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.push_back({b, e});
      pos = e;
      last_end = e;
      continue;
    }
    // An empty match (as Oniguruma's find_iter in the rust onig crate): kept unless it touches the end of
    // the previous match; the search goes on one character further.
    if (b != last_end) out.push_back({b, e});
    last_end = b;
    if (b >= text.size()) return;
    pos = next_char(text, b);
  }
}

}  // namespace mk::tok
