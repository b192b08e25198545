// Statement grammar of the Jinja interpreter: text, {{ output }}, if/elif/else, for (with else, `if`
// filter, loop controls), set (expression and block form, namespace attributes), macro, with, filter
// blocks and transformers' {% generation %}. Any other tag is an error naming it.
#include <algorithm>

#include "tokenizer/jinja_parser.h"

namespace mk::jinja {

namespace {
const char* const UNSUPPORTED_TAGS[] = {"include", "import", "from", "extends", "block", "call", "do",
                                        "autoescape", "trans", "pluralize", "debug"};
}  // namespace

Status Parser::expect_block_end(const char* tag) {
  if (cur().type == Tok::BlockEnd) {
    ++p_;
    return {};
  }
  return fail(cur().offset, cat("expected end of '", tag, "' tag '%}', got ", describe(cur())));
}

// Before a body jinja2 accepts an optional ':' ("{% if x: %}"), as its parse_statements does.
Status Parser::expect_body_start(const char* tag) {
  skip_op(":");
  return expect_block_end(tag);
}

Expected<Body> Parser::parse_all() {
  JJ_ASSIGN(Body body, parse_body({}, nullptr, 0));
  for (const Unknown& u : unknown_)
    if (!u.soft) return fail(u.offset, u.what);
  return body;
}

Expected<Body> Parser::parse_body(const std::vector<std::string>& ends, const char* open, uint32_t open_offset) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::Eof) {
      if (!open) return body;
      return fail(open_offset, cat("unexpected end of template: '", open, "' block is not closed (expected '",
                                   ends.back(), "')"));
    }
    if (t.type == Tok::Text) {
      auto n = node<TextStmt>(t.offset);
      n->text = t.text;
      body.push_back(std::move(n));
      ++p_;
    } else if (t.type == Tok::VarBegin) {
      ++p_;
      auto n = node<OutputStmt>(cur().offset);
      JJ_ASSIGN(n->expr, parse_tuple());
      if (cur().type != Tok::VarEnd) return unexpected("end of print statement '}}'");
      ++p_;
      body.push_back(std::move(n));
    } else if (t.type == Tok::BlockBegin) {
      const Token& name = peek();
      if (name.type == Tok::Name && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
        ++p_;  // leave the end name for the caller
        return body;
      }
      ++p_;
      JJ_ASSIGN(StmtPtr s, parse_statement());
      if (s) body.push_back(std::move(s));
    } else {
      return fail(t.offset, cat("unexpected ", describe(t)));
    }
  }
}

Expected<StmtPtr> Parser::parse_statement() {
  DepthGuard guard(depth_);
  if (guard.too_deep()) return fail(cur().offset, "blocks nested too deeply");
  const Token& t = cur();
  if (t.type != Tok::Name) return fail(t.offset, "expected a tag name after '{%'");
  uint32_t at = t.offset;
  const std::string tag = t.text;
  ++p_;
  if (tag == "if") return parse_if(at);
  if (tag == "for") return parse_for(at);
  if (tag == "set") return parse_set(at);
  if (tag == "macro") return parse_macro(at);
  if (tag == "with") return parse_with(at);
  if (tag == "filter") return parse_filter_block(at);
  if (tag == "generation") return parse_generation(at);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return fail(at, cat("'", tag, "' outside of a for loop"));
    MK_TRY(expect_block_end(tag.c_str()));
    auto n = node<BreakStmt>(at);
    n->is_continue = tag == "continue";
    return StmtPtr(std::move(n));
  }
  for (const char* u : UNSUPPORTED_TAGS)
    if (tag == u) return fail(at, cat("unsupported construct: tag '{% ", tag, " %}'"));
  if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")
    return fail(at, cat("unexpected '{% ", tag, " %}' (no open block it could close)"));
  return fail(at, cat("unsupported construct: unknown tag '{% ", tag, " %}'"));
}

Expected<StmtPtr> Parser::parse_if(uint32_t at) {
  return with_soft(true, [&] { return parse_if_soft(at); });
}

Expected<StmtPtr> Parser::parse_if_soft(uint32_t at) {
  auto n = node<IfStmt>(at);
  while (true) {
    JJ_ASSIGN(ExprPtr cond, parse_tuple(false));
    MK_TRY(expect_body_start("if"));
    JJ_ASSIGN(Body body, parse_body({"elif", "else", "endif"}, "if", at));
    n->branches.emplace_back(std::move(cond), std::move(body));
    std::string end = cur().text;
    ++p_;
    if (end == "elif") continue;
    if (end == "else") {
      MK_TRY(expect_body_start("else"));
      JJ_ASSIGN(n->otherwise, parse_body({"endif"}, "if", at));
      ++p_;
    }
    MK_TRY(expect_block_end("endif"));
    return StmtPtr(std::move(n));
  }
}

Expected<SetTarget> Parser::parse_assign_target(bool with_namespace) {
  SetTarget target;
  if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
    target.names.push_back(cur().text);
    p_ += 2;
    if (cur().type != Tok::Name) return unexpected("an attribute name");
    target.attr = cur().text;
    ++p_;
    return target;
  }
  bool parens = skip_op("(");
  while (true) {
    if (cur().type != Tok::Name) return unexpected("a variable name to assign to");
    const std::string& name = cur().text;
    if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None")
      return fail(cur().offset, cat("cannot assign to '", name, "'"));
    target.names.push_back(name);
    ++p_;
    if (!skip_op(",")) break;
    if (cur().type != Tok::Name) break;  // trailing comma
  }
  if (parens) MK_TRY(expect_op(")"));
  return target;
}

Expected<StmtPtr> Parser::parse_for(uint32_t at) {
  auto n = node<ForStmt>(at);
  JJ_ASSIGN(SetTarget target, parse_assign_target(false));
  n->targets = std::move(target.names);
  if (!skip_name("in")) return unexpected("'in' in for loop");
  JJ_ASSIGN(n->iter, parse_tuple(false, "recursive"));
  if (skip_name("if")) {
    JJ_ASSIGN(n->filter, with_soft(false, [&] { return parse_expression(); }));
  }
  if (is_name("recursive")) return fail(cur().offset, "unsupported construct: recursive for loop");
  MK_TRY(expect_body_start("for"));
  ++loop_depth_;
  auto body = with_soft(false, [&] { return parse_body({"endfor", "else"}, "for", at); });
  --loop_depth_;
  if (!body) return body.error();
  n->body = std::move(*body);
  if (cur().text == "else") {
    ++p_;
    MK_TRY(expect_body_start("else"));
    JJ_ASSIGN(n->otherwise, with_soft(false, [&] { return parse_body({"endfor"}, "for", at); }));
  }
  ++p_;
  MK_TRY(expect_block_end("endfor"));
  return StmtPtr(std::move(n));
}

Expected<std::vector<FilterCall>> Parser::parse_filter_chain() {
  std::vector<FilterCall> filters;
  do {
    JJ_ASSIGN(FilterCall f, parse_filter_name());
    filters.push_back(std::move(f));
  } while (skip_op("|"));
  return filters;
}

Expected<StmtPtr> Parser::parse_set(uint32_t at) {
  JJ_ASSIGN(SetTarget target, parse_assign_target(true));
  if (skip_op("=")) {
    auto n = node<SetStmt>(at);
    n->target = std::move(target);
    JJ_ASSIGN(n->value, parse_tuple());
    MK_TRY(expect_block_end("set"));
    return StmtPtr(std::move(n));
  }
  auto n = node<SetBlockStmt>(at);
  n->target = std::move(target);
  if (n->target.names.size() != 1) return fail(at, "a block set assigns exactly one name");
  if (skip_op("|")) {
    JJ_ASSIGN(n->filters, with_soft(false, [&] { return parse_filter_chain(); }));
  }
  MK_TRY(expect_body_start("set"));
  JJ_ASSIGN(n->body, with_soft(false, [&] { return parse_body({"endset"}, "set", at); }));
  ++p_;
  MK_TRY(expect_block_end("endset"));
  return StmtPtr(std::move(n));
}

Expected<StmtPtr> Parser::parse_macro(uint32_t at) {
  auto n = node<MacroStmt>(at);
  if (cur().type != Tok::Name) return unexpected("a macro name");
  n->name = cur().text;
  ++p_;
  MK_TRY(expect_op("("));
  while (!is_op(")")) {
    if (!n->params.empty()) MK_TRY(expect_op(","));
    if (cur().type != Tok::Name) return unexpected("a macro parameter name");
    std::string param = cur().text;
    for (const auto& [seen, def] : n->params)
      if (seen == param) return fail(cur().offset, cat("duplicate macro parameter '", param, "'"));
    ++p_;
    ExprPtr def;
    if (skip_op("=")) {
      JJ_ASSIGN(def, with_soft(false, [&] { return parse_expression(); }));
    } else if (!n->params.empty() && n->params.back().second) {
      return fail(cur().offset, "macro parameter without default after one with a default");
    }
    n->params.emplace_back(std::move(param), std::move(def));
  }
  MK_TRY(expect_op(")"));
  MK_TRY(expect_body_start("macro"));
  int saved_depth = loop_depth_;
  loop_depth_ = 0;
  auto body = with_soft(false, [&] { return parse_body({"endmacro"}, "macro", at); });
  loop_depth_ = saved_depth;
  if (!body) return body.error();
  n->body = std::move(*body);
  ++p_;
  MK_TRY(expect_block_end("endmacro"));
  return StmtPtr(std::move(n));
}

Expected<StmtPtr> Parser::parse_with(uint32_t at) {
  auto n = node<ScopeStmt>(at);
  while (cur().type != Tok::BlockEnd) {
    if (!n->assignments.empty()) MK_TRY(expect_op(","));
    if (cur().type != Tok::Name) return unexpected("a variable name in 'with'");
    std::string name = cur().text;
    ++p_;
    MK_TRY(expect_op("="));
    JJ_ASSIGN(ExprPtr e, with_soft(false, [&] { return parse_expression(); }));
    n->assignments.emplace_back(std::move(name), std::move(e));
  }
  MK_TRY(expect_body_start("with"));
  JJ_ASSIGN(n->body, with_soft(false, [&] { return parse_body({"endwith"}, "with", at); }));
  ++p_;
  MK_TRY(expect_block_end("endwith"));
  return StmtPtr(std::move(n));
}

Expected<StmtPtr> Parser::parse_filter_block(uint32_t at) {
  auto n = node<FilterBlockStmt>(at);
  JJ_ASSIGN(n->filters, with_soft(false, [&] { return parse_filter_chain(); }));
  MK_TRY(expect_body_start("filter"));
  JJ_ASSIGN(n->body, with_soft(false, [&] { return parse_body({"endfilter"}, "filter", at); }));
  ++p_;
  MK_TRY(expect_block_end("endfilter"));
  return StmtPtr(std::move(n));
}

// transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body in a scope of its
// own, like the call block jinja2 makes of it (tracking assistant token indices is not needed for a prompt).
Expected<StmtPtr> Parser::parse_generation(uint32_t at) {
  auto n = node<ScopeStmt>(at);
  MK_TRY(expect_body_start("generation"));
  JJ_ASSIGN(n->body, with_soft(false, [&] { return parse_body({"endgeneration"}, "generation", at); }));
  ++p_;
  MK_TRY(expect_block_end("endgeneration"));
  return StmtPtr(std::move(n));
}

Expected<std::shared_ptr<Template>> parse_template(std::string_view source) {
  auto t = std::make_shared<Template>();
  t->source = normalize_source(source);
  JJ_ASSIGN(std::vector<Token> tokens, lex(t->source));
  Parser parser(t->source, std::move(tokens));
  JJ_ASSIGN(t->body, parser.parse_all());
  return t;
}

}  // namespace mk::jinja
