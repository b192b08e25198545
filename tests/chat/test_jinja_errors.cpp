// Errors of the Jinja interpreter: unsupported constructs are named with their line and column, runtime
// errors (undefined attribute chains, type errors, raise_exception) fail the render instead of producing
// a wrong prompt.
#include "chat_test_util.h"

using mk::testing::error_of;
using mk::testing::render;

namespace {
void expect_error(const std::string& src, const std::string& needle, const std::string& ctx = "{}") {
  std::string e = error_of(src, ctx);
  EXPECT_NE(e.find(needle), std::string::npos) << "template: " << src << "\nerror: '" << e << "'\nwanted: " << needle;
}
}  // namespace

TEST(JinjaErrors, UnsupportedConstructsAreNamed) {
  expect_error("{% include 'x.j2' %}", "unsupported construct: tag '{% include %}' at line 1, column 4");
  expect_error("ok\n  {% extends 'base' %}", "tag '{% extends %}' at line 2");
  expect_error("{% call m() %}x{% endcall %}", "tag '{% call %}'");
  expect_error("{% do x.append(1) %}", "tag '{% do %}'");
  expect_error("{{ x | wordwrap(3) }}", "unsupported construct: filter 'wordwrap' at line 1, column 8");
  expect_error("\n{{ x is escaped_or_not }}", "unsupported construct: test 'escaped_or_not' at line 2");
  expect_error("{% for x in y recursive %}{% endfor %}", "recursive for loop");
  expect_error("{{ f(*args) }}", "*args");
  expect_error("{{ {1: 'a'} }}", "dict key of type 'int'");
  EXPECT_EQ(render("[{{ 'abc'[1, 2] }}]"), "[]");  // a tuple subscript: no such item, as in jinja2
  expect_error("{{ '%s' % 'x' }}", "printf-style string formatting");
  expect_error("{{ 'abc'.zfill(5) }}", "unsupported construct: method str.zfill()");
  expect_error("{{ [1].append(2) }}", "list.append()");
  expect_error("{% frobnicate %}", "unknown tag '{% frobnicate %}'");
}

// jinja2 checks filter and test names when compiling, except inside `if` statements and inline if-expressions,
// where an unknown one fails only when it is evaluated.
TEST(JinjaErrors, UnknownFiltersInsideIfFailOnlyWhenEvaluated) {
  EXPECT_EQ(render("{% if false %}{{ x | from_json }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{{ (x | from_json) if false else 'ok' }}"), "ok");
  expect_error("{% if true %}{{ x | from_json }}{% endif %}", "unsupported construct: filter 'from_json' (at line 1");
  expect_error("{% if true %}{% for i in [] %}{{ i | from_json }}{% endfor %}{% endif %}",
               "unsupported construct: filter 'from_json' at line 1, column 38");
  expect_error("{{ (x is oddish) if true else 1 }}", "unsupported construct: test 'oddish' (at");
}

TEST(JinjaErrors, SyntaxErrorsHavePositions) {
  expect_error("{% if x %}open", "'if' block is not closed");
  expect_error("{{ x ", "expected '}}'");
  expect_error("{% endfor %}", "unexpected '{% endfor %}'");
  expect_error("{% break %}", "'break' outside of a for loop");
  expect_error("{{ (1 }}", "line 1");
  expect_error("{{ 'unterminated }}", "unterminated string literal");
  expect_error("{# never closed", "missing end of comment tag");
  expect_error("a\nb\n{{ 1 + }}", "line 3, column 8");
}

TEST(JinjaErrors, RuntimeErrors) {
  expect_error("{{ u.attr }}", "'u' is undefined (at line 1, column 5)");
  expect_error("{{ m.a.b }}", "'dict object' has no attribute 'a'", R"({"m": {}})");
  expect_error("{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str");
  expect_error("{{ 1 / 0 }}", "division by zero");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expect_error("{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'");
  expect_error("{% for x in 5 %}{% endfor %}", "'int' object is not iterable");
  expect_error("{{ 'x'.nope() }}", "has no attribute 'nope'");
  expect_error("{{ range(1000000) | length }}", "range too big");
  expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "maximum call depth");
  expect_error("{% set x = 1 %}{% set x.a = 2 %}", "not a namespace");
  expect_error("{{ x | tojson }}", "not JSON serializable");
}

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
  std::string e = error_of("line one\n{{ raise_exception('Conversation roles must alternate user/assistant') }}");
  EXPECT_EQ(e, "chat template: raise_exception: Conversation roles must alternate user/assistant (at line 2, column 19)");
}

TEST(JinjaErrors, RenderingAFunctionIsAnError) {
  EXPECT_NE(error_of("{{ 'x'.upper }}").find("cannot print the function 'str.upper'"), std::string::npos);
  EXPECT_EQ(render("{{ 'x'.upper() }}"), "X");
}

// No input can crash or hang the interpreter: nesting, loops, output size and context depth are bounded.
TEST(JinjaErrors, BudgetsInsteadOfCrashesOrHangs) {
  expect_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "expression nested too deeply");
  expect_error("{{ " + std::string(5000, '-') + "1 }}", "expression nested too deeply");
  std::string ifs;
  for (int k = 0; k < 1000; ++k) ifs += "{% if true %}";
  expect_error(ifs, "nested too deeply");
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "1000000 loop iterations");
  expect_error("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "rendered text exceeds 64 MiB");
  std::string deep = std::string(300, '[') + std::string(300, ']');
  expect_error("{{ x }}", "nested deeper than 256 levels", "{\"x\": " + deep + "}");
}
