// Filters of the Jinja interpreter (jinja2/filters.py semantics, with transformers' own `tojson`:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)). A filter that is not in
// FILTERS is rejected when the template is parsed, naming it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

namespace {

const std::set<std::string> FILTERS = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper"};

int64_t py_len(const Value& v, bool& ok) {
  ok = true;
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return utf8_length(v.s);
    case Kind::List:
      if (v.seq == Seq::Generator) {
        ok = false;
        return 0;
      }
      return int64_t(v.list->size());
    case Kind::Dict: case Kind::Namespace: return int64_t(v.dict->items.size());
    default: ok = false; return 0;
  }
}

Expected<Value> to_int(const Value& v, const Value& def) {
  switch (v.kind) {
    case Kind::Int: return v;
    case Kind::Bool: return Value::integer(v.b);
    case Kind::Float:
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
      return Value::integer(int64_t(v.f));
    case Kind::String: {
      std::string s = py_strip(v.s, std::nullopt, true, true);
      std::string digits;
      for (char c : s)
        if (c != '_') digits += c;
      size_t used = 0;
      try {
        long long x = std::stoll(digits, &used, 10);
        if (used == digits.size() && !digits.empty()) return Value::integer(x);
      } catch (...) {
      }
      try {
        double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(int64_t(d));
      } catch (...) {
      }
      return def;
    }
    default: return def;
  }
}

Expected<Value> to_float(const Value& v, const Value& def) {
  if (v.is_number()) return Value::number(v.as_double());
  if (v.kind == Kind::String) {
    std::string s = py_strip(v.s, std::nullopt, true, true);
    size_t used = 0;
    try {
      double d = std::stod(s, &used);
      if (used == s.size()) return Value::number(d);
    } catch (...) {
    }
  }
  return def;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Expected<Value> tojson(const Value& v, const std::vector<std::optional<Value>>& a) {
  JsonDumpOptions opt;
  if (a[0]) opt.ensure_ascii = truthy(*a[0]);
  if (a[1] && a[1]->kind != Kind::None) {
    opt.has_indent = true;
    if (a[1]->kind == Kind::String) opt.indent = a[1]->s;
    else if (a[1]->kind == Kind::Int) opt.indent = std::string(size_t(std::max<int64_t>(0, a[1]->i)), ' ');
    else return make_error("indent must be an int or a string");
  }
  opt.item_sep = opt.has_indent ? "," : ", ";
  if (a[2] && a[2]->kind != Kind::None) {
    const Value& sep = *a[2];
    if (sep.kind != Kind::List || sep.list->size() != 2 || (*sep.list)[0].kind != Kind::String ||
        (*sep.list)[1].kind != Kind::String)
      return make_error("separators must be a pair of strings");
    opt.item_sep = (*sep.list)[0].s;
    opt.key_sep = (*sep.list)[1].s;
  }
  if (a[3]) opt.sort_keys = truthy(*a[3]);
  JJ_ASSIGN(std::string s, json_dumps(v, opt));
  return Value::string(std::move(s));
}


std::string indent(const std::string& s0, const Value& width, bool first, bool blank) {
  std::string ind = width.kind == Kind::String ? width.s : std::string(size_t(std::max<int64_t>(0, width.i)), ' ');
  std::vector<std::string> lines = py_splitlines(s0 + "\n", false);
  std::string rv;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) {
      rv += '\n';
      if (blank || !lines[k].empty()) rv += ind;
    }
    rv += lines[k];
  }
  return first ? ind + rv : rv;
}

// jinja2's do_title (not str.title): words start after runs of '-', whitespace, '(', '{', '[' or '<'; the
// first character of each word is upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::u32string u = decode_utf8(s);
  std::string out;
  bool word_start = true;
  size_t k = 0;
  while (k < u.size()) {
    char32_t c = u[k];
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    if (sep) {
      append_utf8(out, c);
      word_start = true;
    } else {
      std::string one = encode_utf8(std::u32string(1, c));
      out += word_start ? py_upper(one) : py_lower(one);
      word_start = false;
    }
    ++k;
  }
  return out;
}

}  // namespace

bool is_known_filter(const std::string& name) { return FILTERS.count(name) != 0; }

Expected<std::vector<std::optional<Value>>> bind_args(const CallArgs& args, const std::string& what,
                                                      std::initializer_list<const char*> params) {
  std::vector<const char*> names(params);
  if (args.positional.size() > names.size())
    return make_error(what, " takes at most ", names.size(), " arguments (", args.positional.size(), " given)");
  std::vector<std::optional<Value>> out(names.size());
  for (size_t k = 0; k < args.positional.size(); ++k) out[k] = args.positional[k];
  for (const auto& [key, v] : args.keyword) {
    size_t k = 0;
    while (k < names.size() && key != names[k]) ++k;
    if (k == names.size()) return make_error(what, " got an unexpected keyword argument '", key, "'");
    if (out[k]) return make_error(what, " got multiple values for argument '", key, "'");
    out[k] = v;
  }
  return out;
}

Expected<Value> apply_filter(const std::string& name, const Value& v, const CallArgs& args, Interp& in) {
  auto bind = [&](std::initializer_list<const char*> params) { return bind_args(args, "filter '" + name + "'", params); };
  auto as_bool = [](const std::optional<Value>& o, bool def) { return o ? truthy(*o) : def; };
  // sorted(reverse=...) takes only integers (bools included), like Python.
  auto check_reverse = [](const std::optional<Value>& o) -> Status {
    if (o && o->kind != Kind::Bool && o->kind != Kind::Int)
      return make_error("reverse must be a boolean, not '", type_name(*o), "'");
    return {};
  };
  bool len_ok = true;
  static const std::set<std::string> NO_ARGS = {"length", "count", "upper", "lower", "capitalize", "title", "string",
                                               "safe", "e", "escape", "first", "last", "list", "items", "reverse", "abs"};
  if (NO_ARGS.count(name)) MK_TRY(bind({}));
  if (name == "trim") {
    JJ_ASSIGN(auto a, bind({"chars"}));
    std::optional<std::string> chars;
    if (a[0] && a[0]->kind == Kind::String) chars = a[0]->s;
    return Value::string(py_strip(py_str(v), chars, true, true));
  }
  if (name == "length" || name == "count") {
    int64_t n = py_len(v, len_ok);
    if (!len_ok) return make_error("object of type '", type_name(v), "' has no len()");
    return Value::integer(n);
  }
  if (name == "tojson") {
    JJ_ASSIGN(auto a, bind({"ensure_ascii", "indent", "separators", "sort_keys"}));
    return tojson(v, a);
  }
  if (name == "upper") return Value::string(py_upper(py_str(v)));
  if (name == "lower") return Value::string(py_lower(py_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(py_str(v)));
  if (name == "title") return Value::string(jinja_title(py_str(v)));
  if (name == "string") return Value::string(py_str(v));
  if (name == "safe") return v.kind == Kind::String ? v : Value::string(py_str(v));
  if (name == "e" || name == "escape") return Value::string(html_escape(py_str(v)));
  if (name == "default" || name == "d") {
    JJ_ASSIGN(auto a, bind({"default_value", "boolean"}));
    bool use_default = v.is_undefined() || (as_bool(a[1], false) && !truthy(v));
    return use_default ? (a[0] ? *a[0] : Value::string("")) : v;
  }
  if (name == "join") {
    JJ_ASSIGN(auto a, bind({"d", "attribute"}));
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    std::string sep = a[0] ? py_str(*a[0]) : "";
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += sep;
      out += py_str(a[1] ? sort_key(items[k], a[1], true) : items[k]);
    }
    return Value::string(std::move(out));
  }
  if (name == "first" && v.kind == Kind::List && v.seq == Seq::Generator) {  // next(): takes one item
    if (v.list->empty()) return Value::undefined("no first item, sequence was empty");
    Value front = v.list->front();
    v.list->erase(v.list->begin());
    return front;
  }
  if (name == "last" && v.kind == Kind::List && v.seq == Seq::Generator)
    return make_error("'generator' object is not reversible (add '| list' before '| last')");
  if (name == "first" || name == "last") {
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    if (items.empty()) return Value::undefined(cat("no ", name, " item, sequence was empty"));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    return Value::make_list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_seq({}, Seq::Generator);
    if (v.kind != Kind::Dict) return make_error("can only get item pairs from a mapping, not '", type_name(v), "'");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({Value::string(k), x}, true));
    return Value::make_seq(std::move(out), Seq::Generator);
  }
  if (name == "dictsort") {
    JJ_ASSIGN(auto a, bind({"case_sensitive", "by", "reverse"}));
    MK_TRY(check_reverse(a[2]));
    if (v.kind != Kind::Dict) return make_error("can only sort a mapping, not '", type_name(v), "'");
    bool by_value = a[1] && a[1]->kind == Kind::String && a[1]->s == "value";
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_list({Value::string(k), x}, true));
    JJ_ASSIGN(auto out, sorted(pairs, Value::string(by_value ? "1" : "0"), as_bool(a[0], false), as_bool(a[2], false)));
    return Value::make_list(std::move(out));
  }
  if (name == "int") {
    JJ_ASSIGN(auto a, bind({"default", "base"}));
    return to_int(v, a[0] ? *a[0] : Value::integer(0));
  }
  if (name == "float") {
    JJ_ASSIGN(auto a, bind({"default"}));
    return to_float(v, a[0] ? *a[0] : Value::number(0.0));
  }
  if (name == "abs") {
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.kind == Kind::Int && v.i != INT64_MIN) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == Kind::Bool) return Value::integer(v.b);
    return make_error("bad operand type for abs(): '", type_name(v), "'");
  }
  if (name == "round") {
    JJ_ASSIGN(auto a, bind({"precision", "method"}));
    int64_t prec = (a[0] && a[0]->kind == Kind::Int) ? a[0]->i : 0;
    std::string method = (a[1] && a[1]->kind == Kind::String) ? a[1]->s : "common";
    if (!v.is_number()) return make_error("round needs a number, not '", type_name(v), "'");
    double x = v.as_double(), scale = std::pow(10.0, double(prec));
    if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
    if (method == "floor") return Value::number(std::floor(x * scale) / scale);
    if (method != "common") return make_error("method must be 'common', 'ceil' or 'floor'");
    if (prec < 0 || prec > 300) return make_error("unsupported construct: round with precision ", prec);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(prec), x);  // correctly rounded, half to even, like Python
    return Value::number(std::stod(buf));
  }
  if (name == "replace") {
    JJ_ASSIGN(auto a, bind({"old", "new", "count"}));
    if (!a[0] || !a[1]) return make_error("expected old and new strings");
    int64_t count = (a[2] && a[2]->kind == Kind::Int) ? a[2]->i : -1;
    return Value::string(py_replace(py_str(v), py_str(*a[0]), py_str(*a[1]), count));
  }
  if (name == "reverse") {
    if (v.kind == Kind::String) {
      std::u32string u = decode_utf8(v.s);
      return Value::string(encode_utf8(std::u32string(u.rbegin(), u.rend())));
    }
    // reversed() gives an iterator; a generator has none, so jinja2 falls back to a reversed list.
    bool was_generator = v.kind == Kind::List && v.seq == Seq::Generator;
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    std::vector<Value> out(items.rbegin(), items.rend());
    return was_generator ? Value::make_list(std::move(out)) : Value::make_seq(std::move(out), Seq::Generator);
  }
  if (name == "sort") {
    JJ_ASSIGN(auto a, bind({"reverse", "case_sensitive", "attribute"}));
    MK_TRY(check_reverse(a[0]));
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    JJ_ASSIGN(auto out, sorted(std::move(items), a[2], as_bool(a[1], false), as_bool(a[0], false)));
    return Value::make_list(std::move(out));
  }
  if (name == "unique") {
    JJ_ASSIGN(auto a, bind({"case_sensitive", "attribute"}));
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    std::vector<Value> out, seen;
    for (const Value& item : items) {
      Value key = sort_key(item, a[1], as_bool(a[0], false));
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::make_seq(std::move(out), Seq::Generator);
  }
  if (name == "min" || name == "max") {
    JJ_ASSIGN(auto a, bind({"case_sensitive", "attribute"}));
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    if (items.empty()) return Value::undefined(cat("no ", name, " item, sequence was empty"));
    // Python's min()/max(): the first item whose key is extreme.
    size_t best = 0;
    Value best_key = sort_key(items[0], a[1], as_bool(a[0], false));
    for (size_t k = 1; k < items.size(); ++k) {
      Value key = sort_key(items[k], a[1], as_bool(a[0], false));
      JJ_ASSIGN(bool better, name == "min" ? py_less(key, best_key) : py_less(best_key, key));
      if (better) {
        best = k;
        best_key = std::move(key);
      }
    }
    return items[best];
  }
  if (name == "sum") {
    JJ_ASSIGN(auto a, bind({"attribute", "start"}));
    JJ_ASSIGN(std::vector<Value> items, iterate(v));
    Value acc = a[1] ? *a[1] : Value::integer(0);
    for (const Value& item : items) {
      JJ_ASSIGN(acc, binary_op(BinOp::Add, acc, a[0] ? sort_key(item, a[0], true) : item));
    }
    return acc;
  }
  if (name == "attr") {
    JJ_ASSIGN(auto a, bind({"name"}));
    if (!a[0] || a[0]->kind != Kind::String) return make_error("expected an attribute name");
    return get_attr(v, a[0]->s);
  }
  if (name == "indent") {
    JJ_ASSIGN(auto a, bind({"width", "first", "blank"}));
    return Value::string(indent(py_str(v), a[0] ? *a[0] : Value::integer(4), as_bool(a[1], false), as_bool(a[2], false)));
  }
  if (name == "map") return map_items(v, args, in);
  if (name == "select" || name == "reject") return select_items(v, args, in, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_items(v, args, in, true, name == "selectattr");
  return make_error("unsupported construct: filter '", name, "'");
}

}  // namespace mk::jinja
