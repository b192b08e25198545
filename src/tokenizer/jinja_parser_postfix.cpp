// Postfix and filter grammar of the Jinja interpreter (jinja2/parser.py): attribute access `.name`,
// subscripts and slices `[a:b:c]`, calls with positional and keyword arguments, filters `| name(args)` and
// tests `is [not] name arg`.
#include "tokenizer/jinja_parser.h"

namespace mk::jinja {

Expected<ExprPtr> Parser::parse_call(ExprPtr callee) {
  const uint32_t at = cur().offset;
  JJ_ASSIGN(Args args, parse_call_args());
  auto n = node<CallExpr>(at);
  n->callee = std::move(callee);
  n->args = std::move(args);
  return ExprPtr(std::move(n));
}

Expected<ExprPtr> Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      JJ_ASSIGN(e, parse_subscript(std::move(e)));
    } else if (is_op("(")) {
      JJ_ASSIGN(e, parse_call(std::move(e)));
    } else {
      return e;
    }
  }
}

Expected<ExprPtr> Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      ++p_;
      JJ_ASSIGN(FilterCall f, parse_filter_name());
      auto n = node<FilterExpr>(f.offset);
      n->input = std::move(e);
      n->name = std::move(f.name);
      n->args = std::move(f.args);
      e = std::move(n);
    } else if (is_name("is")) {
      ++p_;
      auto n = node<TestExpr>(cur().offset);
      n->negated = skip_name("not");
      if (cur().type != Tok::Name) return unexpected("a test name after 'is'");
      n->offset = cur().offset;
      n->name = cur().text;
      ++p_;
      while (is_op(".") && peek().type == Tok::Name) {  // dotted names parse (and are never known)
        n->name += "." + peek().text;
        p_ += 2;
      }
      if (!is_known_test(n->name)) note_unknown(n->offset, cat("unsupported construct: test '", n->name, "'"));
      if (is_op("(")) {
        JJ_ASSIGN(n->args, parse_call_args());
      } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                  cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) return fail(cur().offset, "cannot chain multiple tests with 'is'");
        JJ_ASSIGN(ExprPtr arg, parse_primary());
        JJ_ASSIGN(arg, parse_postfix(std::move(arg)));
        n->args.positional.push_back(std::move(arg));
      }
      n->input = std::move(e);
      e = std::move(n);
    } else if (is_op("(")) {
      JJ_ASSIGN(e, parse_call(std::move(e)));
    } else {
      return e;
    }
  }
}

Expected<FilterCall> Parser::parse_filter_name() {
  if (cur().type != Tok::Name) return unexpected("a filter name after '|'");
  FilterCall f;
  f.offset = cur().offset;
  f.name = cur().text;
  ++p_;
  while (is_op(".") && peek().type == Tok::Name) {
    f.name += "." + peek().text;
    p_ += 2;
  }
  if (!is_known_filter(f.name)) note_unknown(f.offset, cat("unsupported construct: filter '", f.name, "'"));
  if (is_op("(")) {
    JJ_ASSIGN(f.args, parse_call_args());
  }
  return f;
}

Expected<ExprPtr> Parser::parse_subscript(ExprPtr e) {
  uint32_t at = cur().offset;
  if (skip_op(".")) {
    if (cur().type == Tok::Name) {
      auto n = node<AttrExpr>(at);
      n->obj = std::move(e);
      n->name = cur().text;
      ++p_;
      return ExprPtr(std::move(n));
    }
    if (cur().type == Tok::Int) {
      auto n = node<ItemExpr>(at);
      auto c = node<ConstExpr>(cur().offset);
      c->value = Value::integer(cur().i);
      n->obj = std::move(e);
      n->index = std::move(c);
      ++p_;
      return ExprPtr(std::move(n));
    }
    return unexpected("an attribute name after '.'");
  }
  MK_TRY(expect_op("["));
  std::vector<ExprPtr> parts;
  while (!is_op("]")) {
    if (!parts.empty()) MK_TRY(expect_op(","));
    if (is_op("]")) break;
    JJ_ASSIGN(ExprPtr part, parse_subscribed());
    parts.push_back(std::move(part));
  }
  MK_TRY(expect_op("]"));
  if (parts.empty()) return fail(at, "expected a subscript inside '[]'");
  if (parts.size() > 1) {  // x[a, b] subscripts with the tuple (a, b)
    auto tuple = node<ListExpr>(parts[0]->offset);
    tuple->items = std::move(parts);
    tuple->tuple = true;
    auto n = node<ItemExpr>(at);
    n->obj = std::move(e);
    n->index = std::move(tuple);
    return ExprPtr(std::move(n));
  }
  if (auto* slice = dynamic_cast<SliceExpr*>(parts[0].get())) {
    slice->obj = std::move(e);
    slice->offset = at;
    return std::move(parts[0]);
  }
  auto n = node<ItemExpr>(at);
  n->obj = std::move(e);
  n->index = std::move(parts[0]);
  return ExprPtr(std::move(n));
}

Expected<ExprPtr> Parser::parse_subscribed() {
  uint32_t at = cur().offset;
  ExprPtr start;
  if (!skip_op(":")) {
    JJ_ASSIGN(start, parse_expression());
    if (!skip_op(":")) return start;
  }
  auto n = node<SliceExpr>(at);
  n->start = std::move(start);
  if (!is_op(":") && !is_op("]") && !is_op(",")) {
    JJ_ASSIGN(n->stop, parse_expression());
  }
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) {
      JJ_ASSIGN(n->step, parse_expression());
    }
  }
  return ExprPtr(std::move(n));
}

Expected<Args> Parser::parse_call_args() {
  Args args;
  MK_TRY(expect_op("("));
  bool first = true;
  while (!is_op(")")) {
    if (!first) MK_TRY(expect_op(","));
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) return fail(cur().offset, "unsupported construct: *args / **kwargs in a call");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string name = cur().text;
      p_ += 2;
      JJ_ASSIGN(ExprPtr v, parse_expression());
      args.keyword.push_back(Keyword{std::move(name), std::move(v)});
    } else {
      if (!args.keyword.empty()) return fail(cur().offset, "positional argument after keyword argument");
      JJ_ASSIGN(ExprPtr v, parse_expression());
      args.positional.push_back(std::move(v));
    }
  }
  MK_TRY(expect_op(")"));
  return args;
}

}  // namespace mk::jinja
