// Sequence filters of the Jinja interpreter (jinja2/filters.py semantics): sort keys with attribute paths,
// sort/min/max ordering, select/reject/selectattr/rejectattr and map. Results of map and select are
// one-shot generators, as in jinja2.
#include <algorithm>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  Value k = item;
  if (attribute && (attribute->kind == Kind::Int || attribute->kind == Kind::Bool)) k = get_item(k, *attribute);
  if (attribute && attribute->kind == Kind::String) {
    // dotted attribute paths ("a.b") as jinja2's make_attrgetter
    for (const auto& part : py_split(attribute->s, std::string("."), -1)) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      k = get_item(k, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    }
  }
  if (!case_sensitive && k.kind == Kind::String) k = Value::string(py_lower(k.s));
  return k;
}

Expected<std::vector<Value>> sorted(std::vector<Value> items, const std::optional<Value>& attribute, bool case_sensitive,
                                    bool reverse) {
  // jinja2 sorts by lists of keys (one per comma-separated attribute), so equal keys are never ordered with
  // '<' (which would fail for dicts or undefined values).
  std::vector<std::optional<Value>> parts{attribute};
  if (attribute && attribute->kind == Kind::String && attribute->s.find(',') != std::string::npos) {
    parts.clear();
    for (auto& p : py_split(attribute->s, std::string(","), -1)) parts.push_back(Value::string(p));
  }
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) {
    std::vector<Value> key;
    for (const auto& part : parts) key.push_back(sort_key(items[k], part, case_sensitive));
    keyed.emplace_back(Value::make_list(std::move(key)), k);
  }
  std::optional<Error> err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto less = reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
    if (!less) {
      if (!err) err = less.error();
      return false;
    }
    return *less;
  });
  if (err) return *err;
  std::vector<Value> out;
  for (auto& [key, k] : keyed) out.push_back(items[k]);
  return out;
}

// select/reject/selectattr/rejectattr: keep items whose test (or truthiness) is `want`.
Expected<Value> select_items(const Value& input, const CallArgs& args, Interp& in, bool by_attr, bool want) {
  JJ_ASSIGN(std::vector<Value> items, iterate(input));
  size_t first_test_arg = by_attr ? 1 : 0;
  std::optional<std::string> attr;
  if (by_attr) {
    if (args.positional.empty() || args.positional[0].kind != Kind::String)
      return make_error("expected an attribute name as first argument");
    attr = args.positional[0].s;
  }
  std::optional<std::string> test;
  if (args.positional.size() > first_test_arg) {
    if (args.positional[first_test_arg].kind != Kind::String) return make_error("expected a test name");
    test = args.positional[first_test_arg].s;
    if (!is_known_test(*test)) return make_error("unsupported construct: test '", *test, "'");
  }
  CallArgs test_args;
  for (size_t k = first_test_arg + 1; k < args.positional.size(); ++k) test_args.positional.push_back(args.positional[k]);
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = attr ? sort_key(item, Value::string(*attr), true) : item;
    bool ok;
    if (test) {
      JJ_ASSIGN(ok, apply_test(*test, subject, test_args, in));
    } else {
      ok = truthy(subject);
    }
    if (ok == want) out.push_back(item);
  }
  return Value::make_seq(std::move(out), Seq::Generator);
}

Expected<Value> map_items(const Value& input, const CallArgs& args, Interp& in) {
  JJ_ASSIGN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = &v;
    else if (k == "default") def = &v;
    else if (args.positional.empty()) return make_error("unexpected keyword argument '", k, "'");
  }
  if (attribute) {
    for (const Value& item : items) {
      Value v = sort_key(item, *attribute, true);
      if (v.is_undefined() && def) v = *def;
      out.push_back(std::move(v));
    }
    return Value::make_seq(std::move(out), Seq::Generator);
  }
  if (args.positional.empty() || args.positional[0].kind != Kind::String)
    return make_error("expected a filter name or attribute=");
  std::string name = args.positional[0].s;
  if (!is_known_filter(name)) return make_error("unsupported construct: filter '", name, "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    JJ_ASSIGN(Value v, apply_filter(name, item, rest, in));
    out.push_back(std::move(v));
  }
  return Value::make_seq(std::move(out), Seq::Generator);
}

}  // namespace mk::jinja
