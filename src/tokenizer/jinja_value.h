// Values of the Jinja interpreter: Python's data model reduced to what chat templates use (undefined, None,
// bool, int, float, str, list/tuple, dict with insertion order, namespace, callables), with Python's
// str()/repr(), truthiness, equality, ordering and json.dumps.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mk::jinja {

struct Value;
class Interp;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
// Flavours of Kind::List: a Python list, a tuple, a one-shot generator (what jinja2's map, select, items...
// filters return: always truthy, no len(), no indexing, not JSON, empty once iterated) or a dict view
// (dict.items() / keys() / values(): no indexing, not JSON).
enum class Seq : uint8_t { List, Tuple, Generator, Items, Keys, Values };

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, unique keys
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Arguments of a call: positional then keyword (name=value).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFn = std::function<Expected<Value>(CallArgs& args, Interp& interp)>;
struct Function {
  std::string name;  // for messages: "str.startswith", "raise_exception", "macro foo"...
  NativeFn fn;
  bool is_macro = false;  // errors of macros already carry their position
};

struct Value {
  Kind kind = Kind::Undefined;
  Seq seq = Seq::List;    // List only
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String; Undefined: why it is undefined ("'x' is undefined")
  std::shared_ptr<std::vector<Value>> list;  // List (never mutated once built)
  std::shared_ptr<ValueDict> dict;           // Dict (never mutated once built), Namespace (mutable)
  std::shared_ptr<Function> fn;              // Function

  static Value undefined(std::string why) { Value v; v.s = std::move(why); return v; }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value make_list(std::vector<Value> items, bool tuple = false);
  static Value make_seq(std::vector<Value> items, Seq seq);
  static Value make_dict(ValueDict d);
  static Value make_namespace(ValueDict d);
  static Value function(std::string name, NativeFn fn);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_tuple() const { return kind == Kind::List && seq == Seq::Tuple; }
  // A list or tuple proper (indexable, sized, JSON-serialisable), not a generator or dict view.
  bool is_sequence() const { return kind == Kind::List && (seq == Seq::List || seq == Seq::Tuple); }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : kind == Kind::Bool ? (b ? 1.0 : 0.0) : double(i); }
};

Value from_json(const nlohmann::ordered_json& j);

// Python type() name, for error messages: 'str', 'int', 'list', 'dict', 'NoneType', 'Undefined'...
const char* type_name(const Value& v);
bool truthy(const Value& v);
std::string py_str(const Value& v);   // str(v); Undefined is ""
std::string py_repr(const Value& v);  // repr(v)
bool py_equal(const Value& a, const Value& b);
// a < b as Python orders them (numbers, strings, lists); error for types Python cannot order.
Expected<bool> py_less(const Value& a, const Value& b);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;       // per level, when has_indent
  std::string item_sep;     // ", " (or "," with indent)
  std::string key_sep = ": ";
};
// json.dumps(v) with Python's formatting (float repr, \uXXXX escapes); error for non-JSON values.
Expected<std::string> json_dumps(const Value& v, const JsonDumpOptions& opt);

}  // namespace mk::jinja

// Evaluates `expr` (an Expected) into `lhs`, returning its error from the enclosing function.
#define JJ_ASSIGN(lhs, expr)                     \
  auto JJ_CONCAT(jj_tmp_, __LINE__) = (expr);    \
  if (!JJ_CONCAT(jj_tmp_, __LINE__)) return JJ_CONCAT(jj_tmp_, __LINE__).error(); \
  lhs = std::move(*JJ_CONCAT(jj_tmp_, __LINE__))
#define JJ_CONCAT_(a, b) a##b
#define JJ_CONCAT(a, b) JJ_CONCAT_(a, b)
