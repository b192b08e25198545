// Tests (`x is name`) of the Jinja interpreter, as jinja2/tests.py defines them. A test that is not in
// TESTS is rejected when the template is parsed, naming it.
#include <set>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

namespace {
const std::set<std::string> TESTS = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false", "filter",
    "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=", "lower", "lt",
    "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "test",
    "true", "undefined", "upper"};

// str.islower() / str.isupper(): at least one cased character and none of the other case.
bool case_test(const std::string& s, bool want_lower) {
  bool cased = false;
  for (char32_t c : decode_utf8(s)) {
    std::string one = encode_utf8(std::u32string(1, c));
    bool is_lower = py_upper(one) != one;  // has an upper-case form: a lower-case letter
    bool is_upper = py_lower(one) != one;
    if (is_lower || is_upper) {
      cased = true;
      if (want_lower ? is_upper : is_lower) return false;
    }
  }
  return cased;
}
}  // namespace

bool is_known_test(const std::string& name) { return TESTS.count(name) != 0; }

Expected<bool> apply_test(const std::string& name, const Value& v, const CallArgs& args, Interp&) {
  static const std::set<std::string> ONE_ARG = {"divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan",
                                                "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "sameas", "in"};
  if (!ONE_ARG.count(name) && (!args.positional.empty() || !args.keyword.empty()))
    return make_error("takes no arguments");
  auto arg = [&]() -> Expected<Value> {
    if (args.positional.size() + args.keyword.size() != 1) return make_error("expects exactly one argument");
    return args.positional.empty() ? args.keyword[0].second : args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::None;
  if (name == "string") return v.kind == Kind::String;
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "number") return v.is_number();
  if (name == "mapping") return v.kind == Kind::Dict;
  if (name == "iterable") return v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::String || v.is_undefined();
  if (name == "sequence") return v.is_sequence() || v.kind == Kind::Dict || v.kind == Kind::String || v.is_undefined();
  if (name == "callable") return v.kind == Kind::Function;
  if (name == "escaped") return false;
  if (name == "lower") return case_test(py_str(v), true);
  if (name == "upper") return case_test(py_str(v), false);
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::Int && v.kind != Kind::Bool) return make_error("needs an integer, not '", type_name(v), "'");
    int64_t x = v.kind == Kind::Bool ? v.b : v.i;
    return ((x % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    JJ_ASSIGN(Value d, arg());
    if (v.kind != Kind::Int || d.kind != Kind::Int) return make_error("needs integers");
    if (d.i == 0) return make_error("integer division or modulo by zero");
    return v.i % d.i == 0;
  }
  if (name == "filter" || name == "test") {
    return v.kind == Kind::String && (name == "filter" ? is_known_filter(v.s) : is_known_test(v.s));
  }
  JJ_ASSIGN(Value other, arg());
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other);
  if (name == "ne" || name == "!=") return !py_equal(v, other);
  if (name == "sameas") {
    if (v.kind != other.kind) return false;
    switch (v.kind) {
      case Kind::None: case Kind::Undefined: return v.kind == Kind::None;
      case Kind::Bool: return v.b == other.b;
      case Kind::List: return v.list == other.list;
      case Kind::Dict: case Kind::Namespace: return v.dict == other.dict;
      case Kind::Function: return v.fn == other.fn;
      default: return py_equal(v, other);
    }
  }
  if (name == "in") return contains(other, v);
  bool lt = name == "lt" || name == "lessthan" || name == "<";
  bool le = name == "le" || name == "<=";
  bool gt = name == "gt" || name == "greaterthan" || name == ">";
  if (lt || le || gt || name == "ge" || name == ">=") {
    if (v.is_undefined() || other.is_undefined()) return make_error("value is undefined");
    auto less = (lt || name == "ge" || name == ">=") ? py_less(v, other) : py_less(other, v);
    if (!less) return less.error();
    return (lt || gt) ? *less : !*less;
  }
  return make_error("unsupported construct: test '", name, "'");
}

}  // namespace mk::jinja
