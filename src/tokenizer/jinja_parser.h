// Recursive-descent parser of the Jinja interpreter (internal): the grammar of jinja2/parser.py for the
// constructs in jinja_ast.h. Expressions in jinja_parser_expr.cpp, statements in jinja_parser_stmt.cpp.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace mk::jinja {

// A new AST node of type T at source offset `offset` (the parser files' shorthand).
template <class T>
std::unique_ptr<T> node(uint32_t offset) {
  auto n = std::make_unique<T>();
  n->offset = offset;
  return n;
}

bool is_known_filter(const std::string& name);  // jinja_filters.cpp
bool is_known_test(const std::string& name);    // jinja_tests.cpp

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}
  Expected<Body> parse_all();

 private:
  // ---- tokens ----
  const Token& cur() const { return toks_[p_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(p_ + n, toks_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op);
  bool skip_name(const char* name);
  Error fail(uint32_t offset, const std::string& what) const;
  Error unexpected(const char* expected) const;  // "expected X, got Y at ..."
  Status expect_op(const char* op);
  Status expect_block_end(const char* tag);
  Status expect_body_start(const char* tag);
  std::string describe(const Token& t) const;

  // ---- statements ----
  // Parses until `{% name` with name in `ends` (left at that name); `open` names the block for errors.
  Expected<Body> parse_body(const std::vector<std::string>& ends, const char* open, uint32_t open_offset);
  Expected<StmtPtr> parse_statement();
  Expected<StmtPtr> parse_if(uint32_t at);
  Expected<StmtPtr> parse_if_soft(uint32_t at);
  Expected<StmtPtr> parse_for(uint32_t at);
  Expected<StmtPtr> parse_set(uint32_t at);
  Expected<StmtPtr> parse_macro(uint32_t at);
  Expected<StmtPtr> parse_with(uint32_t at);
  Expected<StmtPtr> parse_filter_block(uint32_t at);
  Expected<StmtPtr> parse_generation(uint32_t at);
  Expected<SetTarget> parse_assign_target(bool with_namespace);
  Expected<std::vector<FilterCall>> parse_filter_chain();

  // ---- expressions ----
  Expected<ExprPtr> parse_expression(bool with_condexpr = true);
  // Comma-separated expressions; a tuple if there is a comma. `end_name` ends it as well as tag ends and ')'.
  Expected<ExprPtr> parse_tuple(bool with_condexpr = true, const char* end_name = nullptr, bool explicit_parens = false);
  Expected<ExprPtr> parse_condexpr();
  Expected<ExprPtr> parse_or();
  Expected<ExprPtr> parse_and();
  Expected<ExprPtr> parse_not();
  Expected<ExprPtr> parse_compare();
  Expected<ExprPtr> parse_math1();
  Expected<ExprPtr> parse_concat();
  Expected<ExprPtr> parse_math2();
  Expected<ExprPtr> parse_pow();
  Expected<ExprPtr> parse_unary(bool with_filter = true);
  Expected<ExprPtr> parse_primary();
  Expected<ExprPtr> parse_list();
  Expected<ExprPtr> parse_dict();
  Expected<ExprPtr> parse_postfix(ExprPtr node);
  Expected<ExprPtr> parse_call(ExprPtr callee);  // `(args)` at the current token, applied to callee
  Expected<ExprPtr> parse_filter_expr(ExprPtr node);
  Expected<ExprPtr> parse_subscript(ExprPtr node);
  Expected<ExprPtr> parse_subscribed();
  Expected<Args> parse_call_args();
  Expected<FilterCall> parse_filter_name();

  // Unknown filters and tests: jinja2 rejects them when compiling, except inside if statements and inline
  // if-expressions ("soft" frames), where they fail only if evaluated. We do the same.
  struct Unknown {
    uint32_t offset;
    std::string what;
    bool soft;
  };
  void note_unknown(uint32_t offset, std::string what) { unknown_.push_back({offset, std::move(what), soft_}); }
  // Runs `f` with the soft flag set to `soft`, restoring it afterwards.
  template <class F>
  auto with_soft(bool soft, F&& f) {
    bool saved = soft_;
    soft_ = soft;
    auto r = f();
    soft_ = saved;
    return r;
  }

  const std::string& src_;
  std::vector<Token> toks_;
  size_t p_ = 0;
  int loop_depth_ = 0;  // break/continue are only valid inside for loops
  bool soft_ = false;
  std::vector<Unknown> unknown_;
  int depth_ = 0;  // nesting of expressions and blocks; bounded so that no input can exhaust the stack

 public:
  static constexpr int MAX_DEPTH = 200;
  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    bool too_deep() const { return depth > MAX_DEPTH; }
    int& depth;
  };
};

}  // namespace mk::jinja
