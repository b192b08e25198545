// Evaluator state of the Jinja interpreter (internal): variable scopes (globals, template, one per for
// iteration / macro call / with block, as jinja2 scopes them), the output buffer, and the helpers that
// filters, tests and methods share (argument binding, attribute and item access, iteration).
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace mk::jinja {

using Scope = std::unordered_map<std::string, Value>;

class Interp {
 public:
  Interp(const Template& t, Scope globals);
  Expected<std::string> run();

  Value lookup(const std::string& name) const;  // Undefined when unset
  void assign(const std::string& name, Value v) { scopes_.back()->insert_or_assign(name, std::move(v)); }
  void push_scope() { scopes_.push_back(std::make_shared<Scope>()); }
  void pop_scope() { scopes_.pop_back(); }
  // Macro calls see the globals and the template's top-level variables, not the caller's locals.
  std::vector<std::shared_ptr<Scope>> enter_macro_scope();
  void leave_macro_scope(std::vector<std::shared_ptr<Scope>> saved) { scopes_ = std::move(saved); }

  std::string& out() { return *out_; }
  // Runs `body` with its output captured into a string (block set, filter block, macro call).
  Expected<std::string> capture(const Body& body);
  Expected<Flow> exec_body(const Body& body);

  Error fail(uint32_t offset, const std::string& what) const;
  Expected<Value> call(const Value& callee, CallArgs& args, uint32_t offset);
  Expected<CallArgs> eval_args(const Args& args);

  // Budgets, so that no template can hang or exhaust memory: loop iterations and macro calls per render,
  // and the size of the output.
  Status count_step(uint32_t offset);
  Status check_output(uint32_t offset) const;
  static constexpr int64_t MAX_STEPS = 1'000'000;
  static constexpr size_t MAX_OUTPUT = size_t(64) << 20;
  int call_depth = 0;  // guards against unbounded macro recursion
  int64_t steps = 0;
  const Template& tmpl;

 private:
  std::vector<std::shared_ptr<Scope>> scopes_;  // [0] globals, [1] template top level, then inner scopes
  std::string* out_ = nullptr;
};

// ---- shared helpers (jinja_eval_expr.cpp) ----
// obj.name: Python attribute first (str/dict/list methods), then item; Undefined when neither exists.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: item first, then attribute for string keys; Undefined when neither exists.
Value get_item(const Value& obj, const Value& key);
// The items `for` iterates over (list items, dict keys, string characters); error for non-iterables.
Expected<std::vector<Value>> iterate(const Value& v);
Expected<Value> binary_op(BinOp op, const Value& l, const Value& r);
Expected<bool> contains(const Value& container, const Value& item);

// Binds call arguments to `params` by position and name (Python rules); missing ones are nullopt.
Expected<std::vector<std::optional<Value>>> bind_args(const CallArgs& args, const std::string& what,
                                                      std::initializer_list<const char*> params);

// ---- filters, tests, methods, globals ----
Expected<Value> apply_filter(const std::string& name, const Value& input, const CallArgs& args, Interp& in);
Expected<bool> apply_test(const std::string& name, const Value& input, const CallArgs& args, Interp& in);
// Sequence filters (jinja_filters_seq.cpp). sort_key: the item or its (dotted) attribute, lower-cased
// strings unless case_sensitive; sorted: stable sort by that key.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive);
Expected<std::vector<Value>> sorted(std::vector<Value> items, const std::optional<Value>& attribute,
                                    bool case_sensitive, bool reverse);
Expected<Value> select_items(const Value& input, const CallArgs& args, Interp& in, bool by_attr, bool want);
Expected<Value> map_items(const Value& input, const CallArgs& args, Interp& in);
// Bound method of a str/dict/list value, or nullopt when `name` is no method of that type.
std::optional<Value> get_method(const Value& obj, const std::string& name);
Scope default_globals();  // range, namespace, dict, raise_exception, strftime_now

}  // namespace mk::jinja
