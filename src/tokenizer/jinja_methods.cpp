// Methods of str, dict and list values (what `message.content.startswith(...)` calls) and the globals that
// transformers gives chat templates: range (capped like jinja2's sandbox), namespace, dict,
// raise_exception, strftime_now. Python methods we do not implement still resolve, and fail when called
// with an error naming them; methods that would modify a value fail as the immutable sandbox does.
#include <algorithm>
#include <ctime>
#include <set>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

namespace {

const std::set<std::string> STR_METHODS = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::set<std::string> DICT_METHODS = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                            "pop", "popitem", "setdefault", "update", "values"};
const std::set<std::string> LIST_METHODS = {"append", "clear", "copy", "count", "extend", "index",
                                            "insert", "pop", "remove", "reverse", "sort"};
const std::set<std::string> MUTATING = {"clear", "pop", "popitem", "setdefault", "update", "append",
                                        "extend", "insert", "remove", "reverse", "sort"};

// An optional str argument (absent or None: nullopt); Python raises TypeError for other types.
Expected<std::optional<std::string>> opt_str(const std::optional<Value>& v) {
  if (!v || v->kind == Kind::None) return std::optional<std::string>();
  if (v->kind != Kind::String) return make_error("must be str or None, not ", type_name(*v));
  return std::optional<std::string>(v->s);
}

int64_t cp_index(const std::string& s, size_t byte_pos) {
  return byte_pos == std::string::npos ? -1 : utf8_length(std::string_view(s).substr(0, byte_pos));
}

// startswith/endswith accept a string or a tuple of strings.
Expected<bool> affix_test(const std::string& s, const Value& arg, bool start) {
  std::vector<Value> options = arg.kind == Kind::List ? *arg.list : std::vector<Value>{arg};
  for (const Value& o : options) {
    if (o.kind != Kind::String)
      return make_error("argument must be str or a tuple of str, not '", type_name(o), "'");
    if (start ? s.rfind(o.s, 0) == 0 : (s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0))
      return true;
  }
  return false;
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::make_list(std::move(out));
}

Expected<Value> call_str_method(const std::string& s, const std::string& name, CallArgs& args) {
  std::string what = "str." + name + "()";
  auto bind = [&](std::initializer_list<const char*> p) { return bind_args(args, what, p); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    JJ_ASSIGN(auto a, bind({"chars"}));
    JJ_ASSIGN(auto chars, opt_str(a[0]));
    return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    JJ_ASSIGN(auto a, bind({"prefix", "start", "end"}));
    if (!a[0]) return make_error(what, " takes at least 1 argument");
    if (a[1] || a[2]) return make_error("unsupported construct: ", what, " with start/end");
    JJ_ASSIGN(bool r, affix_test(s, *a[0], name == "startswith"));
    return Value::boolean(r);
  }
  if (name == "split" || name == "rsplit") {
    JJ_ASSIGN(auto a, bind({"sep", "maxsplit"}));
    JJ_ASSIGN(auto sep, opt_str(a[0]));
    if (sep && sep->empty()) return make_error("empty separator");
    if (a[1] && a[1]->kind != Kind::Int && a[1]->kind != Kind::Bool)
      return make_error("'", type_name(*a[1]), "' object cannot be interpreted as an integer");
    int64_t maxsplit = !a[1] ? -1 : a[1]->kind == Kind::Bool ? int64_t(a[1]->b) : a[1]->i;
    return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    JJ_ASSIGN(auto a, bind({"keepends"}));
    return str_list(py_splitlines(s, a[0] && truthy(*a[0])));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "replace") {
    JJ_ASSIGN(auto a, bind({"old", "new", "count"}));
    if (!a[0] || !a[1] || a[0]->kind != Kind::String || a[1]->kind != Kind::String)
      return make_error(what, " needs two strings");
    int64_t count = (a[2] && a[2]->kind == Kind::Int) ? a[2]->i : -1;
    return Value::string(py_replace(s, a[0]->s, a[1]->s, count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    JJ_ASSIGN(auto a, bind({"sub", "start", "end"}));
    if (!a[0] || a[0]->kind != Kind::String) return make_error(what, " needs a string argument");
    if (a[1] || a[2]) return make_error("unsupported construct: ", what, " with start/end");
    if (name == "count") return Value::integer(py_count(s, a[0]->s));
    bool right = name[0] == 'r';
    int64_t idx = cp_index(s, right ? s.rfind(a[0]->s) : s.find(a[0]->s));
    if (idx < 0 && (name == "index" || name == "rindex")) return make_error("substring not found");
    return Value::integer(idx);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    JJ_ASSIGN(auto a, bind({"affix"}));
    if (!a[0] || a[0]->kind != Kind::String) return make_error(what, " needs a string argument");
    const std::string& x = a[0]->s;
    if (name == "removeprefix") return Value::string(s.rfind(x, 0) == 0 ? s.substr(x.size()) : s);
    bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value::string(ends && !x.empty() ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "join") {
    JJ_ASSIGN(auto a, bind({"iterable"}));
    if (!a[0]) return make_error(what, " takes exactly one argument");
    JJ_ASSIGN(std::vector<Value> items, iterate(*a[0]));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (items[k].kind != Kind::String)
        return make_error("sequence item ", k, ": expected str instance, ", type_name(items[k]), " found");
      if (k) out += s;
      out += items[k].s;
    }
    return Value::string(std::move(out));
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isascii") {
    std::u32string u = decode_utf8(s);
    if (name != "isascii" && u.empty()) return Value::boolean(false);
    auto ok = [&](char32_t c) {
      if (name == "isspace") return py_isspace(c);
      if (name == "isascii") return c < 0x80;
      bool digit = c >= '0' && c <= '9';
      bool alpha = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
      if (c >= 0x80) return false;  // non-ASCII classes are not needed by chat templates
      return name == "isdigit" ? digit : name == "isalpha" ? alpha : (digit || alpha);
    };
    for (char32_t c : u)
      if (!ok(c)) {
        if (c >= 0x80 && name != "isspace" && name != "isascii")
          return make_error("unsupported construct: ", what, " on non-ASCII text");
        return Value::boolean(false);
      }
    return Value::boolean(true);
  }
  return make_error("unsupported construct: method ", what);
}

Expected<Value> call_dict_method(const Value& d, const std::string& name, CallArgs& args) {
  std::string what = "dict." + name + "()";
  if (name == "get") {
    JJ_ASSIGN(auto a, bind_args(args, what, {"key", "default"}));
    if (!a[0]) return make_error(what, " takes at least 1 argument");
    if (a[0]->kind == Kind::String)
      if (const Value* v = d.dict->find(a[0]->s)) return *v;
    return a[1] ? *a[1] : Value::none();
  }
  if (!args.positional.empty() || !args.keyword.empty()) return make_error(what, " takes no arguments");
  std::vector<Value> out;
  Seq view;
  if (name == "items") {
    for (const auto& [k, v] : d.dict->items) out.push_back(Value::make_list({Value::string(k), v}, true));
    view = Seq::Items;
  } else if (name == "keys") {
    for (const auto& kv : d.dict->items) out.push_back(Value::string(kv.first));
    view = Seq::Keys;
  } else if (name == "values") {
    for (const auto& kv : d.dict->items) out.push_back(kv.second);
    view = Seq::Values;
  } else if (name == "copy") {
    return Value::make_dict(*d.dict);
  } else {
    return make_error("unsupported construct: method ", what);
  }
  return Value::make_seq(std::move(out), view);
}

Expected<Value> call_list_method(const Value& l, const std::string& name, CallArgs& args) {
  std::string what = "list." + name + "()";
  if (name == "copy") return Value::make_list(*l.list, l.is_tuple());
  if (name == "count" || name == "index") {
    JJ_ASSIGN(auto a, bind_args(args, what, {"value"}));
    if (!a[0]) return make_error(what, " takes exactly one argument");
    int64_t n = 0;
    for (size_t k = 0; k < l.list->size(); ++k) {
      if (!py_equal((*l.list)[k], *a[0])) continue;
      if (name == "index") return Value::integer(int64_t(k));
      ++n;
    }
    if (name == "index") return make_error(py_repr(*a[0]), " is not in list");
    return Value::integer(n);
  }
  return make_error("unsupported construct: method ", what);
}

}  // namespace

std::optional<Value> get_method(const Value& obj, const std::string& name) {
  const std::set<std::string>* names = obj.kind == Kind::String ? &STR_METHODS
                                       : obj.kind == Kind::Dict ? &DICT_METHODS
                                       : obj.kind == Kind::List ? &LIST_METHODS
                                                                : nullptr;
  if (!names || !names->count(name)) return std::nullopt;
  if (obj.kind == Kind::List && !obj.is_sequence()) return std::nullopt;  // generators and views: no methods
  std::string type = obj.kind == Kind::String ? "str" : obj.kind == Kind::Dict ? "dict" : type_name(obj);
  if (obj.kind != Kind::String && MUTATING.count(name)) {
    return Value::function(type + "." + name, [type, name](CallArgs&, Interp&) -> Expected<Value> {
      return make_error("unsupported construct: ", type, ".", name, "() (templates cannot modify a ", type, ")");
    });
  }
  Value self = obj;
  return Value::function(type + "." + name, [self, name](CallArgs& args, Interp&) -> Expected<Value> {
    if (self.kind == Kind::String) return call_str_method(self.s, name, args);
    if (self.kind == Kind::Dict) return call_dict_method(self, name, args);
    return call_list_method(self, name, args);
  });
}

namespace {

Expected<ValueDict> dict_from_args(const CallArgs& args, const char* what) {
  ValueDict d;
  if (args.positional.size() > 1) return make_error(what, " takes at most one positional argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.kind == Kind::Dict) {
      d = *src.dict;
    } else if (src.kind == Kind::List) {
      for (const Value& pair : *src.list) {
        if (pair.kind != Kind::List || pair.list->size() != 2 || (*pair.list)[0].kind != Kind::String)
          return make_error(what, ": expected (name, value) pairs");
        d.set((*pair.list)[0].s, (*pair.list)[1]);
      }
    } else {
      return make_error(what, ": cannot build a mapping from '", type_name(src), "'");
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Expected<Value> range_fn(CallArgs& args, Interp&) {
  std::vector<int64_t> p;
  for (const Value& v : args.positional) {
    if (v.kind != Kind::Int && v.kind != Kind::Bool) return make_error("range() needs integers, not '", type_name(v), "'");
    p.push_back(v.kind == Kind::Bool ? v.b : v.i);
  }
  if (p.empty() || p.size() > 3 || !args.keyword.empty()) return make_error("range() takes 1 to 3 integers");
  int64_t start = p.size() > 1 ? p[0] : 0, stop = p.size() > 1 ? p[1] : p[0], step = p.size() > 2 ? p[2] : 1;
  if (step == 0) return make_error("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    if (out.size() >= 100000) return make_error("range too big, maximum size for range is 100000");
    out.push_back(Value::integer(k));
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Scope default_globals() {
  Scope g;
  g["range"] = Value::function("range", range_fn);
  g["namespace"] = Value::function("namespace", [](CallArgs& args, Interp&) -> Expected<Value> {
    JJ_ASSIGN(ValueDict d, dict_from_args(args, "namespace()"));
    for (const auto& kv : d.items)
      if (!kv.first.empty() && kv.first[0] == '_')
        return make_error("chat templates cannot store underscore-prefixed attributes on a namespace, but got '",
                          kv.first, "'");
    return Value::make_namespace(std::move(d));
  });
  g["dict"] = Value::function("dict", [](CallArgs& args, Interp&) -> Expected<Value> {
    JJ_ASSIGN(ValueDict d, dict_from_args(args, "dict()"));
    return Value::make_dict(std::move(d));
  });
  g["raise_exception"] = Value::function("raise_exception", [](CallArgs& args, Interp&) -> Expected<Value> {
    std::string msg = args.positional.empty() ? "" : py_str(args.positional[0]);
    return make_error("raise_exception: ", msg);
  });
  g["strftime_now"] = Value::function("strftime_now", [](CallArgs& args, Interp&) -> Expected<Value> {
    if (args.positional.size() != 1 || args.positional[0].kind != Kind::String)
      return make_error("strftime_now() takes one format string");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, args.positional[0].s.c_str(), &local);
    return Value::string(std::string(buf, n));
  });
  return g;
}

}  // namespace mk::jinja
