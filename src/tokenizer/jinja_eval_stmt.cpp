// Statement execution of the Jinja interpreter and the Interp core (scopes, calls, output capture).
// Scoping follows jinja2: `if` shares its scope, every for-loop iteration starts a fresh scope over the
// enclosing one (so `set` inside a loop never leaks out, nor into the next iteration), macros see only the
// globals and top-level variables; namespace attributes are the way to carry state out of a loop.
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace mk::jinja {

namespace {
constexpr int MAX_CALL_DEPTH = 200;
}

Interp::Interp(const Template& t, Scope globals) : tmpl(t) {
  scopes_.push_back(std::make_shared<Scope>(std::move(globals)));
  scopes_.push_back(std::make_shared<Scope>());
}

Expected<std::string> Interp::run() {
  std::string result;
  out_ = &result;
  JJ_ASSIGN(Flow f, exec_body(tmpl.body));
  (void)f;
  return result;
}

Value Interp::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto hit = (*it)->find(name);
    if (hit != (*it)->end()) return hit->second;
  }
  return Value::undefined(cat("'", name, "' is undefined"));
}

std::vector<std::shared_ptr<Scope>> Interp::enter_macro_scope() {
  std::vector<std::shared_ptr<Scope>> saved = scopes_;
  scopes_.resize(2);
  push_scope();
  return saved;
}

Error Interp::fail(uint32_t offset, const std::string& what) const {
  return make_error(what, " (at ", describe_position(tmpl.source, offset), ")");
}

Status Interp::count_step(uint32_t offset) {
  if (++steps > MAX_STEPS)
    return fail(offset, cat("template exceeded ", MAX_STEPS, " loop iterations and macro calls"));
  return {};
}

Status Interp::check_output(uint32_t offset) const {
  if (out_->size() > MAX_OUTPUT) return fail(offset, cat("rendered text exceeds ", MAX_OUTPUT >> 20, " MiB"));
  return {};
}

Expected<CallArgs> Interp::eval_args(const Args& args) {
  CallArgs out;
  for (const auto& e : args.positional) {
    JJ_ASSIGN(Value v, e->eval(*this));
    out.positional.push_back(std::move(v));
  }
  for (const auto& kw : args.keyword) {
    JJ_ASSIGN(Value v, kw.value->eval(*this));
    out.keyword.emplace_back(kw.name, std::move(v));
  }
  return out;
}

Expected<Value> Interp::call(const Value& callee, CallArgs& args, uint32_t offset) {
  if (callee.is_undefined()) return fail(offset, callee.s);
  if (callee.kind != Kind::Function) return fail(offset, cat("'", type_name(callee), "' object is not callable"));
  if (call_depth >= MAX_CALL_DEPTH) return fail(offset, "maximum call depth exceeded (unbounded macro recursion?)");
  MK_TRY(count_step(offset));
  ++call_depth;
  auto r = callee.fn->fn(args, *this);
  --call_depth;
  if (!r && !callee.fn->is_macro) return fail(offset, r.message());
  return r;
}

Expected<std::string> Interp::capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  auto f = exec_body(body);
  out_ = saved;
  if (!f) return f.error();
  return buffer;
}

Expected<Flow> Interp::exec_body(const Body& body) {
  for (const auto& s : body) {
    JJ_ASSIGN(Flow f, s->exec(*this));
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Expected<Flow> TextStmt::exec(Interp& in) const {
  in.out() += text;
  MK_TRY(in.check_output(offset));
  return Flow::Normal;
}

Expected<Flow> OutputStmt::exec(Interp& in) const {
  JJ_ASSIGN(Value v, expr->eval(in));
  if (v.kind == Kind::Function)
    return in.fail(offset, cat("cannot print the function '", v.fn->name, "' (call it with '()')"));
  if (v.kind == Kind::List && v.seq == Seq::Generator)  // jinja2 would print "<generator object ... at 0x...>"
    return in.fail(offset, "cannot print a generator (the result of map/select/reverse/...; add '| list')");
  in.out() += py_str(v);
  MK_TRY(in.check_output(offset));
  return Flow::Normal;
}

Expected<Flow> IfStmt::exec(Interp& in) const {
  for (const auto& [cond, body] : branches) {
    JJ_ASSIGN(Value c, cond->eval(in));
    if (truthy(c)) return in.exec_body(body);
  }
  return in.exec_body(otherwise);
}

namespace {

Status bind_targets(Interp& in, const std::vector<std::string>& names, const Value& v, uint32_t offset) {
  if (names.size() == 1) {
    in.assign(names[0], v);
    return {};
  }
  auto items = iterate(v);
  if (!items) return in.fail(offset, cat("cannot unpack: ", items.message()));
  if (items->size() != names.size())
    return in.fail(offset, cat("cannot unpack ", items->size(), " values into ", names.size(), " names"));
  for (size_t k = 0; k < names.size(); ++k) in.assign(names[k], (*items)[k]);
  return {};
}

Value loop_object(const std::vector<Value>& items, size_t k, const Value& cycle) {
  int64_t n = int64_t(items.size()), i = int64_t(k);
  ValueDict d;
  d.items.reserve(12);
  d.items.emplace_back("index", Value::integer(i + 1));
  d.items.emplace_back("index0", Value::integer(i));
  d.items.emplace_back("revindex", Value::integer(n - i));
  d.items.emplace_back("revindex0", Value::integer(n - i - 1));
  d.items.emplace_back("first", Value::boolean(i == 0));
  d.items.emplace_back("last", Value::boolean(i == n - 1));
  d.items.emplace_back("length", Value::integer(n));
  d.items.emplace_back("depth", Value::integer(1));
  d.items.emplace_back("depth0", Value::integer(0));
  d.items.emplace_back("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
  d.items.emplace_back("nextitem", k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item"));
  d.items.emplace_back("cycle", cycle);
  return Value::make_dict(std::move(d));
}

}  // namespace

Expected<Flow> ForStmt::exec(Interp& in) const {
  JJ_ASSIGN(Value seq, iter->eval(in));
  auto listed = iterate(seq);
  if (!listed) return in.fail(iter->offset, listed.message());
  std::vector<Value> items;
  if (filter) {
    for (const Value& v : *listed) {
      in.push_scope();
      Status st = bind_targets(in, targets, v, offset);
      Expected<Value> keep = st ? filter->eval(in) : Expected<Value>(st.error());
      in.pop_scope();
      if (!keep) return keep.error();
      if (truthy(*keep)) items.push_back(v);
    }
  } else {
    items = std::move(*listed);
  }
  // jinja2 quirk, kept: `else` runs unless some iteration reached the end of the body, so an iteration
  // that ends in break or continue does not count.
  bool completed_any = false;
  auto index = std::make_shared<size_t>(0);  // loop.cycle reads the current iteration through this
  Value cycle = Value::function("loop.cycle", [index](CallArgs& a, Interp&) -> Expected<Value> {
    if (a.positional.empty()) return make_error("no items for cycling given");
    return a.positional[*index % a.positional.size()];
  });
  for (size_t k = 0; k < items.size(); ++k) {
    *index = k;
    MK_TRY(in.count_step(offset));
    in.push_scope();
    in.assign("loop", loop_object(items, k, cycle));
    Status st = bind_targets(in, targets, items[k], offset);
    Expected<Flow> f = st ? in.exec_body(body) : Expected<Flow>(st.error());
    in.pop_scope();
    if (!f) return f.error();
    if (*f == Flow::Normal) completed_any = true;
    if (*f == Flow::Break) break;
  }
  if (!completed_any) {
    in.push_scope();
    auto f = in.exec_body(otherwise);
    in.pop_scope();
    if (!f) return f.error();
  }
  return Flow::Normal;
}

namespace {
Status assign_target(Interp& in, const SetTarget& t, Value v, uint32_t offset) {
  if (!t.attr.empty()) {
    Value ns = in.lookup(t.names[0]);
    if (ns.kind != Kind::Namespace)
      return in.fail(offset, cat("cannot assign attribute '", t.attr, "' on '", t.names[0], "' (a ",
                                 type_name(ns), ", not a namespace)"));
    ns.dict->set(t.attr, std::move(v));
    return {};
  }
  return bind_targets(in, t.names, v, offset);
}

Expected<Value> apply_filters(Interp& in, const std::vector<FilterCall>& filters, Value v) {
  for (const auto& f : filters) {
    if (!is_known_filter(f.name)) return in.fail(f.offset, cat("unsupported construct: filter '", f.name, "'"));
    JJ_ASSIGN(CallArgs a, in.eval_args(f.args));
    auto r = apply_filter(f.name, v, a, in);
    if (!r) return in.fail(f.offset, cat("filter '", f.name, "': ", r.message()));
    v = std::move(*r);
  }
  return v;
}
}  // namespace

Expected<Flow> SetStmt::exec(Interp& in) const {
  JJ_ASSIGN(Value v, value->eval(in));
  MK_TRY(assign_target(in, target, std::move(v), offset));
  return Flow::Normal;
}

Expected<Flow> SetBlockStmt::exec(Interp& in) const {
  in.push_scope();
  auto text = in.capture(body);
  in.pop_scope();
  if (!text) return text.error();
  JJ_ASSIGN(Value v, apply_filters(in, filters, Value::string(std::move(*text))));
  MK_TRY(assign_target(in, target, std::move(v), offset));
  return Flow::Normal;
}

Expected<Flow> FilterBlockStmt::exec(Interp& in) const {
  in.push_scope();
  auto text = in.capture(body);
  in.pop_scope();
  if (!text) return text.error();
  JJ_ASSIGN(Value v, apply_filters(in, filters, Value::string(std::move(*text))));
  in.out() += py_str(v);
  return Flow::Normal;
}

Expected<Flow> BreakStmt::exec(Interp&) const { return is_continue ? Flow::Continue : Flow::Break; }

Expected<Flow> ScopeStmt::exec(Interp& in) const {
  in.push_scope();
  for (const auto& [name, e] : assignments) {
    auto v = e->eval(in);
    if (!v) {
      in.pop_scope();
      return v.error();
    }
    in.assign(name, std::move(*v));
  }
  auto f = in.exec_body(body);
  in.pop_scope();
  return f;
}

Expected<Flow> MacroStmt::exec(Interp& in) const {
  const MacroStmt* self = this;
  Value fn = Value::function("macro '" + name + "'", [self](CallArgs& args, Interp& in2) -> Expected<Value> {
    if (args.positional.size() > self->params.size())
      return in2.fail(self->offset, cat("macro '", self->name, "' takes ", self->params.size(), " arguments, ",
                                        args.positional.size(), " given"));
    std::vector<std::optional<Value>> bound(self->params.size());
    for (size_t k = 0; k < args.positional.size(); ++k) bound[k] = args.positional[k];
    for (auto& [key, v] : args.keyword) {
      size_t k = 0;
      while (k < self->params.size() && self->params[k].first != key) ++k;
      if (k == self->params.size())
        return in2.fail(self->offset, cat("macro '", self->name, "' has no parameter '", key, "'"));
      bound[k] = v;
    }
    auto saved = in2.enter_macro_scope();
    for (size_t k = 0; k < bound.size(); ++k) {
      Value v;
      if (bound[k]) {
        v = *bound[k];
      } else if (self->params[k].second) {
        auto d = self->params[k].second->eval(in2);
        if (!d) {
          in2.leave_macro_scope(std::move(saved));
          return d.error();
        }
        v = std::move(*d);
      } else {
        v = Value::undefined(cat("parameter '", self->params[k].first, "' was not provided"));
      }
      in2.assign(self->params[k].first, std::move(v));
    }
    auto text = in2.capture(self->body);
    in2.leave_macro_scope(std::move(saved));
    if (!text) return text.error();
    return Value::string(std::move(*text));
  });
  fn.fn->is_macro = true;
  in.assign(name, std::move(fn));
  return Flow::Normal;
}

}  // namespace mk::jinja
