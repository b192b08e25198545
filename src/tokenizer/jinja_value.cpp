// Python data model for the Jinja interpreter (see jinja_value.h).
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void ValueDict::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::make_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.seq = tuple ? Seq::Tuple : Seq::List;
  v.list = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::make_seq(std::vector<Value> items, Seq seq) {
  Value v = make_list(std::move(items));
  v.seq = seq;
  return v;
}

Value Value::make_dict(ValueDict d) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<ValueDict>(std::move(d));
  return v;
}

Value Value::make_namespace(ValueDict d) {
  Value v = make_dict(std::move(d));
  v.kind = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::make_list(std::move(items));
    }
    case T::object: {
      ValueDict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, from_json(e));
      return Value::make_dict(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by JSON text
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List:
      switch (v.seq) {
        case Seq::List: return "list";
        case Seq::Tuple: return "tuple";
        case Seq::Generator: return "generator";
        case Seq::Items: return "dict_items";
        case Seq::Keys: return "dict_keys";
        case Seq::Values: return "dict_values";
      }
      return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0;
    case Kind::String: return !v.s.empty();
    case Kind::List: return v.seq == Seq::Generator || !v.list->empty();
    case Kind::Dict: return !v.dict->items.empty();
    case Kind::Namespace: case Kind::Function: return true;
  }
  return false;
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::String: return v.s;
    default: return py_repr(v);
  }
}

std::string py_repr(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return py_repr_float(v.f);
    case Kind::String: return py_repr_string(v.s);
    case Kind::List: {
      if (v.seq == Seq::Generator) return "<generator object>";
      bool tuple = v.seq == Seq::Tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += py_repr((*v.list)[k]);
      }
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return v.is_sequence() ? out : std::string(type_name(v)) + "(" + out + ")";
    }
    case Kind::Dict: case Kind::Namespace: {
      std::string out = v.kind == Kind::Namespace ? "<Namespace {" : "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k) out += ", ";
        out += py_repr_string(v.dict->items[k].first) + ": " + py_repr(v.dict->items[k].second);
      }
      return out + (v.kind == Kind::Namespace ? "}>" : "}");
    }
    case Kind::Function: return "<function " + v.fn->name + ">";
  }
  return "";
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::Float && b.kind != Kind::Float)
      return (a.kind == Kind::Bool ? int64_t(a.b) : a.i) == (b.kind == Kind::Bool ? int64_t(b.b) : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List:
      if (a.seq != b.seq || a.list->size() != b.list->size()) return false;
      if (a.seq == Seq::Generator) return a.list == b.list;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!py_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Kind::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, val] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (!other || !py_equal(val, *other)) return false;
      }
      return true;
    case Kind::Namespace: return a.dict == b.dict;
    case Kind::Function: return a.fn == b.fn;
    default: return false;
  }
}

Expected<bool> py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::Float && b.kind != Kind::Float)
      return (a.kind == Kind::Bool ? int64_t(a.b) : a.i) < (b.kind == Kind::Bool ? int64_t(b.b) : b.i);
    return a.as_double() < b.as_double();
  }
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s;  // UTF-8 keeps code point order
  if (a.is_sequence() && b.is_sequence() && a.seq == b.seq) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      const Value& x = (*a.list)[k];
      const Value& y = (*b.list)[k];
      if (py_equal(x, y)) continue;
      return py_less(x, y);
    }
    return a.list->size() < b.list->size();
  }
  return make_error("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  auto esc = [&](uint32_t c) {
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += buf;
  };
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {  // surrogate pair, as Python writes it
            uint32_t v = uint32_t(c) - 0x10000;
            esc(0xD800 + (v >> 10));
            esc(0xDC00 + (v & 0x3FF));
          } else {
            esc(uint32_t(c));
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

Status json_value(std::string& out, const Value& v, const JsonDumpOptions& opt, int depth) {
  auto newline = [&](int d) {
    if (!opt.has_indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += opt.indent;
  };
  switch (v.kind) {
    case Kind::None: out += "null"; return {};
    case Kind::Bool: out += v.b ? "true" : "false"; return {};
    case Kind::Int: out += std::to_string(v.i); return {};
    case Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += py_repr_float(v.f);
      return {};
    case Kind::String: json_string(out, v.s, opt.ensure_ascii); return {};
    case Kind::List: {
      if (!v.is_sequence()) return make_error("tojson: Object of type ", type_name(v), " is not JSON serializable");
      if (v.list->empty()) { out += "[]"; return {}; }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += opt.item_sep;
        newline(depth + 1);
        MK_TRY(json_value(out, (*v.list)[k], opt, depth + 1));
      }
      newline(depth);
      out += ']';
      return {};
    }
    case Kind::Dict: {
      if (v.dict->items.empty()) { out += "{}"; return {}; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += opt.item_sep;
        newline(depth + 1);
        json_string(out, items[k]->first, opt.ensure_ascii);
        out += opt.key_sep;
        MK_TRY(json_value(out, items[k]->second, opt, depth + 1));
      }
      newline(depth);
      out += '}';
      return {};
    }
    default:
      return make_error("tojson: Object of type ", type_name(v), " is not JSON serializable");
  }
}

}  // namespace

Expected<std::string> json_dumps(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  MK_TRY(json_value(out, v, opt, 0));
  return out;
}

}  // namespace mk::jinja
