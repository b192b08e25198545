// `megakernel tokenize --tokenizer DIR (--text T | --file F) [--json]`: the ids of the raw UTF-8 text as
// Hugging Face tokenizers gives them with add_special_tokens=False. Human-readable output is one
// `id<TAB>token<TAB>"text"` line per token (the token as written in the vocabulary, then the text it stands
// for, escaped); --json prints one JSON array.
// A hidden `--jsonl FILE` mode (for tests/tokenizer/differential_test.py) reads lines {"hex": "<bytes>"}
// (text to encode) or {"ids": [...]} (ids to decode) and prints one line {"ids": [...], "decoded_hex": ...,
// "decoded_skip_hex": ..., "stream_hex": ...} for each (hex: bytes as lowercase hex digits).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "megakernel/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mk::cli {

namespace {
struct TokenizeOptions {
  std::string tokenizer, text, file, jsonl;
  bool json = false;
};

std::string to_hex(std::string_view s) {
  static const char* HEX = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += HEX[c >> 4], out += HEX[c & 15];
  return out;
}

Expected<std::string> from_hex(const std::string& h) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (h.size() % 2) return make_error("odd number of hex digits");
  std::string out(h.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int a = nibble(h[2 * i]), b = nibble(h[2 * i + 1]);
    if (a < 0 || b < 0) return make_error("bad hex digit near offset ", 2 * i);
    out[i] = static_cast<char>(a * 16 + b);
  }
  return out;
}

// The bytes of a token for a terminal: "…" with escapes for control characters and for bytes that are not
// (yet) a whole UTF-8 character (\xNN).
std::string escaped_text(std::string_view bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const int n = tok::utf8_sequence(reinterpret_cast<const unsigned char*>(bytes.data()) + i, bytes.size() - i);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7F)) out.append(bytes.substr(i, static_cast<size_t>(n)));
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
    i += n > 0 ? static_cast<size_t>(n) : 1;
  }
  return out + "\"";
}

Expected<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error("cannot open --file ", path, ": no such file or not readable");
  std::ostringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

int run_jsonl(const Tokenizer& tok, const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return std::fprintf(stderr, "megakernel: error: cannot open --jsonl %s\n", path.c_str()), 1;
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    Expected<std::string> text = make_error("line is not {\"hex\": string} or {\"ids\": [int]}");
    std::vector<int32_t> ids;
    bool decode_only = false;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("hex") && j["hex"].is_string()) {
        text = from_hex(j["hex"].get<std::string>());
      } else if (j.is_object() && j.contains("ids") && j["ids"].is_array()) {
        ids = j["ids"].get<std::vector<int32_t>>();
        decode_only = true;
        text = std::string();
      }
    } catch (const nlohmann::json::exception& e) {
      text = make_error(e.what());
    }
    if (!text) return std::fprintf(stderr, "megakernel: error: --jsonl line %zu: %s\n", n, text.message().c_str()), 1;
    if (!decode_only) ids = tok.encode(*text);
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    nlohmann::json out = {{"ids", ids},
                          {"decoded_hex", to_hex(tok.decode(ids))},
                          {"decoded_skip_hex", to_hex(tok.decode(ids, true))},
                          {"stream_hex", to_hex(streamed)}};
    std::fputs((out.dump() + "\n").c_str(), stdout);
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  auto tok = Tokenizer::load(o.tokenizer);
  if (!tok) return std::fprintf(stderr, "megakernel: error: %s\n", tok.message().c_str()), 1;
  if (!o.jsonl.empty()) return run_jsonl(*tok, o.jsonl);
  std::string text = o.text;
  if (!o.file.empty()) {
    auto content = read_file(o.file);
    if (!content) return std::fprintf(stderr, "megakernel: error: %s\n", content.message().c_str()), 1;
    text = std::move(*content);
  }
  const std::vector<int32_t> ids = tok->encode(text);
  if (o.json) {
    std::fputs((nlohmann::json(ids).dump() + "\n").c_str(), stdout);
    return 0;
  }
  std::string out;
  for (int32_t id : ids) out += std::to_string(id) + "\t" + tok->token_text(id) + "\t" + escaped_text(tok->token_bytes(id)) + "\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
}  // namespace

Command add_tokenize_command(CLI::App& parent) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* sub = parent.add_subcommand(
      "tokenize", "Print the token ids of a text, as Hugging Face tokenizers does with add_special_tokens=False");
  sub->add_option("--tokenizer", o->tokenizer, "Folder holding tokenizer.json (or the tokenizer.json file)")
      ->required();
  auto* text = sub->add_option("--text", o->text, "The text to tokenize");
  auto* file = sub->add_option("--file", o->file, "A file whose bytes are the text to tokenize");
  auto* jsonl = sub->add_option("--jsonl", o->jsonl, "")->group("");  // hidden: test mode (see above)
  text->excludes(file)->excludes(jsonl);
  file->excludes(jsonl);
  sub->add_flag("--json", o->json, "Print the ids as one JSON array on one line");
  sub->callback([sub, text, file, jsonl] {
    if (!text->count() && !file->count() && !jsonl->count())
      throw CLI::RequiredError("one of --text or --file");
    (void)sub;
  });
  return {sub, [o] { return run_tokenize(*o); }};
}

}  // namespace mk::cli
