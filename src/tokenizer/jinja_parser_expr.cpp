// Expression grammar of the Jinja interpreter, following jinja2/parser.py: condexpr > or > and > not >
// compare > + - > ~ > * / // % > ** > unary > primary with postfix (. [] ()) and filters/tests (| is).
#include <cstring>

#include "tokenizer/jinja_parser.h"

namespace mk::jinja {

namespace {
ExprPtr make_binary(BinOp op, ExprPtr l, ExprPtr r) {
  auto n = node<BinaryExpr>(l->offset);
  n->op = op;
  n->left = std::move(l);
  n->right = std::move(r);
  return n;
}
}  // namespace

bool Parser::skip_op(const char* op) {
  if (!is_op(op)) return false;
  ++p_;
  return true;
}
bool Parser::skip_name(const char* name) {
  if (!is_name(name)) return false;
  ++p_;
  return true;
}
Error Parser::fail(uint32_t offset, const std::string& what) const {
  return make_error(what, " at ", describe_position(src_, offset));
}
std::string Parser::describe(const Token& t) const {
  switch (t.type) {
    case Tok::Text: return "template text";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "end of print statement '}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "end of statement block '%}'";
    case Tok::Name: return "'" + t.text + "'";
    case Tok::String: return "string literal";
    case Tok::Int: case Tok::Float: return "number '" + t.text + "'";
    case Tok::Op: return "'" + t.text + "'";
    case Tok::Eof: return "end of template";
  }
  return "?";
}
Error Parser::unexpected(const char* expected) const {
  return fail(cur().offset, cat("expected ", expected, ", got ", describe(cur())));
}
Status Parser::expect_op(const char* op) {
  if (skip_op(op)) return {};
  return unexpected(cat("'", op, "'").c_str());
}

Expected<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

Expected<ExprPtr> Parser::parse_tuple(bool with_condexpr, const char* end_name, bool explicit_parens) {
  uint32_t at = cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) MK_TRY(expect_op(","));
    Tok t = cur().type;
    if (t == Tok::VarEnd || t == Tok::BlockEnd || t == Tok::Eof || is_op(")") || (end_name && is_name(end_name)))
      break;
    JJ_ASSIGN(ExprPtr e, parse_expression(with_condexpr));
    items.push_back(std::move(e));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return unexpected("an expression");
  }
  auto n = node<ListExpr>(at);
  n->items = std::move(items);
  n->tuple = true;
  return ExprPtr(std::move(n));
}

Expected<ExprPtr> Parser::parse_condexpr() {
  size_t mark = unknown_.size();
  JJ_ASSIGN(ExprPtr e, parse_or());
  while (skip_name("if")) {
    for (size_t k = mark; k < unknown_.size(); ++k) unknown_[k].soft = true;  // the whole expression is soft
    JJ_ASSIGN(ExprPtr cond, with_soft(true, [&] { return parse_or(); }));
    ExprPtr otherwise;
    if (skip_name("else")) {
      JJ_ASSIGN(otherwise, with_soft(true, [&] { return parse_condexpr(); }));
    }
    auto n = node<CondExpr>(e->offset);
    n->then = std::move(e);
    n->cond = std::move(cond);
    n->otherwise = std::move(otherwise);
    e = std::move(n);
  }
  return e;
}

Expected<ExprPtr> Parser::parse_or() {
  JJ_ASSIGN(ExprPtr e, parse_and());
  while (skip_name("or")) {
    JJ_ASSIGN(ExprPtr r, parse_and());
    e = make_binary(BinOp::Or, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_and() {
  JJ_ASSIGN(ExprPtr e, parse_not());
  while (skip_name("and")) {
    JJ_ASSIGN(ExprPtr r, parse_not());
    e = make_binary(BinOp::And, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_not() {
  DepthGuard guard(depth_);
  if (guard.too_deep()) return fail(cur().offset, "expression nested too deeply");
  if (is_name("not")) {
    uint32_t at = cur().offset;
    ++p_;
    JJ_ASSIGN(ExprPtr operand, parse_not());
    auto n = node<UnaryExpr>(at);
    n->op = UnaryOp::Not;
    n->operand = std::move(operand);
    return ExprPtr(std::move(n));
  }
  return parse_compare();
}

Expected<ExprPtr> Parser::parse_compare() {
  JJ_ASSIGN(ExprPtr first, parse_math1());
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
  while (true) {
    CmpOp op;
    if (skip_op("==")) op = CmpOp::Eq;
    else if (skip_op("!=")) op = CmpOp::Ne;
    else if (skip_op("<")) op = CmpOp::Lt;
    else if (skip_op("<=")) op = CmpOp::Le;
    else if (skip_op(">")) op = CmpOp::Gt;
    else if (skip_op(">=")) op = CmpOp::Ge;
    else if (skip_name("in")) op = CmpOp::In;
    else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      p_ += 2;
      op = CmpOp::NotIn;
    } else {
      break;
    }
    JJ_ASSIGN(ExprPtr e, parse_math1());
    rest.emplace_back(op, std::move(e));
  }
  if (rest.empty()) return first;
  auto n = node<CompareExpr>(first->offset);
  n->first = std::move(first);
  n->rest = std::move(rest);
  return ExprPtr(std::move(n));
}

Expected<ExprPtr> Parser::parse_math1() {
  JJ_ASSIGN(ExprPtr e, parse_concat());
  while (is_op("+") || is_op("-")) {
    BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
    ++p_;
    JJ_ASSIGN(ExprPtr r, parse_concat());
    e = make_binary(op, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_concat() {
  JJ_ASSIGN(ExprPtr e, parse_math2());
  while (skip_op("~")) {
    JJ_ASSIGN(ExprPtr r, parse_math2());
    e = make_binary(BinOp::Concat, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_math2() {
  JJ_ASSIGN(ExprPtr e, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string& t = cur().text;
    BinOp op = t == "*" ? BinOp::Mul : t == "/" ? BinOp::Div : t == "//" ? BinOp::FloorDiv : BinOp::Mod;
    ++p_;
    JJ_ASSIGN(ExprPtr r, parse_pow());
    e = make_binary(op, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_pow() {
  JJ_ASSIGN(ExprPtr e, parse_unary());
  while (skip_op("**")) {
    JJ_ASSIGN(ExprPtr r, parse_unary());
    e = make_binary(BinOp::Pow, std::move(e), std::move(r));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  if (guard.too_deep()) return fail(cur().offset, "expression nested too deeply");
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    uint32_t at = cur().offset;
    UnaryOp op = cur().text == "-" ? UnaryOp::Neg : UnaryOp::Pos;
    ++p_;
    JJ_ASSIGN(ExprPtr operand, parse_unary(false));
    auto n = node<UnaryExpr>(at);
    n->op = op;
    n->operand = std::move(operand);
    e = std::move(n);
  } else {
    JJ_ASSIGN(e, parse_primary());
  }
  JJ_ASSIGN(e, parse_postfix(std::move(e)));
  if (with_filter) {
    JJ_ASSIGN(e, parse_filter_expr(std::move(e)));
  }
  return e;
}

Expected<ExprPtr> Parser::parse_primary() {
  const Token& t = cur();
  uint32_t at = t.offset;
  auto constant = [&](Value v) {
    auto n = node<ConstExpr>(at);
    n->value = std::move(v);
    return ExprPtr(std::move(n));
  };
  switch (t.type) {
    case Tok::Name: {
      ++p_;
      if (t.text == "true" || t.text == "True") return constant(Value::boolean(true));
      if (t.text == "false" || t.text == "False") return constant(Value::boolean(false));
      if (t.text == "none" || t.text == "None") return constant(Value::none());
      auto n = node<NameExpr>(at);
      n->name = t.text;
      return ExprPtr(std::move(n));
    }
    case Tok::String: {
      std::string s;
      while (cur().type == Tok::String) s += toks_[p_++].text;  // adjacent literals concatenate
      return constant(Value::string(std::move(s)));
    }
    case Tok::Int: ++p_; return constant(Value::integer(t.i));
    case Tok::Float: ++p_; return constant(Value::number(t.f));
    case Tok::Op:
      if (t.text == "(") {
        ++p_;
        JJ_ASSIGN(ExprPtr e, parse_tuple(true, nullptr, true));
        MK_TRY(expect_op(")"));
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  return fail(at, cat("unexpected ", describe(t), " (expected an expression)"));
}

Expected<ExprPtr> Parser::parse_list() {
  auto n = node<ListExpr>(cur().offset);
  MK_TRY(expect_op("["));
  while (!is_op("]")) {
    if (!n->items.empty()) MK_TRY(expect_op(","));
    if (is_op("]")) break;
    JJ_ASSIGN(ExprPtr e, parse_expression());
    n->items.push_back(std::move(e));
  }
  MK_TRY(expect_op("]"));
  return ExprPtr(std::move(n));
}

Expected<ExprPtr> Parser::parse_dict() {
  auto n = node<DictExpr>(cur().offset);
  MK_TRY(expect_op("{"));
  while (!is_op("}")) {
    if (!n->items.empty()) MK_TRY(expect_op(","));
    if (is_op("}")) break;
    JJ_ASSIGN(ExprPtr k, parse_expression());
    MK_TRY(expect_op(":"));
    JJ_ASSIGN(ExprPtr v, parse_expression());
    n->items.emplace_back(std::move(k), std::move(v));
  }
  MK_TRY(expect_op("}"));
  return ExprPtr(std::move(n));
}

}  // namespace mk::jinja
