// Expression evaluation of the Jinja interpreter with Python semantics: int/float arithmetic (overflow of
// 64-bit ints is an error, never a wrapped value), str/list concatenation and repetition, chained
// comparisons, `in`, slicing with steps, attribute-then-item lookup as jinja2's getattr/getitem.
#include <cmath>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_strings.h"

namespace mk::jinja {

namespace {

Error undefined_error(const Value& v) { return make_error(v.s.empty() ? "value is undefined" : v.s); }

bool is_int_like(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }
int64_t int_of(const Value& v) { return v.kind == Kind::Bool ? int64_t(v.b) : v.i; }

Error type_error(const char* op, const Value& l, const Value& r) {
  return make_error("unsupported operand type(s) for ", op, ": '", type_name(l), "' and '", type_name(r), "'");
}

Expected<Value> repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.kind == Kind::String) {
    if (n > 0 && seq.s.size() * size_t(n) > (size_t(1) << 28)) return make_error("string repetition too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  if (n > 0 && seq.list->size() * size_t(n) > (size_t(1) << 24)) return make_error("list repetition too large");
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.is_tuple());
}

// Python's slice.indices(n) and the selected positions.
Expected<std::vector<int64_t>> slice_positions(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_int = [](const Value& v, const char* what) -> Expected<std::optional<int64_t>> {
    if (v.kind == Kind::None) return std::optional<int64_t>();
    if (!is_int_like(v)) return make_error("slice indices must be integers or None, not '", type_name(v), "' (", what, ")");
    return std::optional<int64_t>(int_of(v));
  };
  JJ_ASSIGN(auto st, as_int(step, "step"));
  int64_t s = st.value_or(1);
  if (s == 0) return make_error("slice step cannot be zero");
  JJ_ASSIGN(auto b, as_int(start, "start"));
  JJ_ASSIGN(auto e, as_int(stop, "stop"));
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < 0) v = s < 0 ? -1 : 0;
    } else if (v >= n) {
      v = s < 0 ? n - 1 : n;
    }
    return v;
  };
  int64_t lo = clamp(b, s < 0 ? n - 1 : 0);
  int64_t hi = clamp(e, s < 0 ? -1 : n);
  std::vector<int64_t> out;
  if (s > 0)
    for (int64_t k = lo; k < hi; k += s) out.push_back(k);
  else
    for (int64_t k = lo; k > hi; k += s) out.push_back(k);
  return out;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::Namespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(cat("'Namespace' object has no attribute '", name, "'"));
  }
  if (auto m = get_method(obj, name)) return *m;
  if (obj.kind == Kind::Dict) {
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(cat("'dict object' has no attribute '", name, "'"));
  }
  return Value::undefined(cat("'", type_name(obj), " object' has no attribute '", name, "'"));
}

Value get_item(const Value& obj, const Value& key) {
  if ((obj.is_sequence() || obj.kind == Kind::String) && is_int_like(key)) {
    int64_t idx = int_of(key);
    if (obj.kind == Kind::List) {
      int64_t n = int64_t(obj.list->size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return (*obj.list)[size_t(idx)];
    } else {
      std::u32string u = decode_utf8(obj.s);
      int64_t n = int64_t(u.size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return Value::string(encode_utf8(u.substr(size_t(idx), 1)));
    }
    return Value::undefined(cat("'", type_name(obj), " object' has no element ", int_of(key)));
  }
  if (obj.kind == Kind::Dict && key.kind == Kind::String)
    if (const Value* v = obj.dict->find(key.s)) return *v;
  if (key.kind == Kind::String) return get_attr(obj, key.s);
  return Value::undefined(cat("'", type_name(obj), " object' has no element ", py_repr(key)));
}

Expected<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return std::vector<Value>{};
    case Kind::List:
      if (v.seq == Seq::Generator) {  // one-shot, like the Python generator it stands for
        std::vector<Value> items = std::move(*v.list);
        v.list->clear();
        return items;
      }
      return *v.list;
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : decode_utf8(v.s)) chars.push_back(Value::string(encode_utf8(std::u32string(1, c))));
      return chars;
    }
    default: return make_error("'", type_name(v), "' object is not iterable");
  }
}

Expected<bool> contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::String:
      if (item.kind != Kind::String)
        return make_error("'in <string>' requires string as left operand, not ", type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::List: {
      JJ_ASSIGN(std::vector<Value> items, iterate(container));
      for (const Value& x : items)
        if (py_equal(x, item)) return true;
      return false;
    }
    case Kind::Dict: return item.kind == Kind::String && container.dict->find(item.s) != nullptr;
    case Kind::Undefined: return false;
    default: return make_error("argument of type '", type_name(container), "' is not iterable");
  }
}

Expected<Value> binary_op(BinOp op, const Value& l, const Value& r) {
  if (op == BinOp::Concat) return Value::string(py_str(l) + py_str(r));
  if (op == BinOp::Mod && l.kind == Kind::String)
    return make_error("unsupported construct: printf-style string formatting with '%'");
  if (l.is_undefined()) return undefined_error(l);
  if (r.is_undefined()) return undefined_error(r);
  static const char* const SYMBOL[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char* sym = SYMBOL[int(op)];
  if (l.is_number() && r.is_number()) {
    bool ints = is_int_like(l) && is_int_like(r);
    int64_t a = int_of(l), b = int_of(r), res = 0;
    double x = l.as_double(), y = r.as_double();
    switch (op) {
      case BinOp::Add:
        if (!ints) return Value::number(x + y);
        if (__builtin_add_overflow(a, b, &res)) return make_error("integer overflow in '+'");
        return Value::integer(res);
      case BinOp::Sub:
        if (!ints) return Value::number(x - y);
        if (__builtin_sub_overflow(a, b, &res)) return make_error("integer overflow in '-'");
        return Value::integer(res);
      case BinOp::Mul:
        if (!ints) return Value::number(x * y);
        if (__builtin_mul_overflow(a, b, &res)) return make_error("integer overflow in '*'");
        return Value::integer(res);
      case BinOp::Div:
        if (y == 0) return make_error("division by zero");
        return Value::number(x / y);
      case BinOp::FloorDiv:
        if (y == 0) return make_error("integer division or modulo by zero");
        if (!ints) return Value::number(std::floor(x / y));
        if (a == INT64_MIN && b == -1) return make_error("integer overflow in '//'");
        return Value::integer(a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
      case BinOp::Mod:
        if (y == 0) return make_error("integer division or modulo by zero");
        if (!ints) {
          double m = std::fmod(x, y);
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value::number(m);
        }
        if (b == -1) return Value::integer(0);
        res = a % b;
        if (res != 0 && ((res < 0) != (b < 0))) res += b;
        return Value::integer(res);
      case BinOp::Pow:
        if (ints && b >= 0) {
          int64_t acc = 1;
          for (int64_t k = 0; k < b; ++k) {
            if (__builtin_mul_overflow(acc, a, &acc)) return make_error("integer overflow in '**'");
            if (acc == 0 || acc == 1) break;
          }
          return Value::integer(acc);
        }
        if (x == 0 && y < 0) return make_error("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(x, y));
      default: break;
    }
  }
  if (op == BinOp::Add) {
    if (l.kind == Kind::String && r.kind == Kind::String) return Value::string(l.s + r.s);
    if (l.is_sequence() && r.is_sequence() && l.seq == r.seq) {
      std::vector<Value> out = *l.list;
      out.insert(out.end(), r.list->begin(), r.list->end());
      return Value::make_list(std::move(out), l.is_tuple());
    }
    if (l.kind == Kind::String)
      return make_error("can only concatenate str (not \"", type_name(r), "\") to str");
  }
  if (op == BinOp::Mul) {
    if ((l.kind == Kind::String || l.is_sequence()) && is_int_like(r)) return repeat(l, int_of(r));
    if ((r.kind == Kind::String || r.is_sequence()) && is_int_like(l)) return repeat(r, int_of(l));
  }
  return type_error(sym, l, r);
}

// ---- nodes ----

Expected<Value> ConstExpr::eval(Interp&) const { return value; }

Expected<Value> NameExpr::eval(Interp& in) const { return in.lookup(name); }

Expected<Value> ListExpr::eval(Interp& in) const {
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& e : items) {
    JJ_ASSIGN(Value v, e->eval(in));
    out.push_back(std::move(v));
  }
  return Value::make_list(std::move(out), tuple);
}

Expected<Value> DictExpr::eval(Interp& in) const {
  ValueDict d;
  for (const auto& [ke, ve] : items) {
    JJ_ASSIGN(Value k, ke->eval(in));
    if (k.kind != Kind::String)
      return in.fail(ke->offset, cat("unsupported construct: dict key of type '", type_name(k), "' (only strings)"));
    JJ_ASSIGN(Value v, ve->eval(in));
    d.set(k.s, std::move(v));
  }
  return Value::make_dict(std::move(d));
}

Expected<Value> AttrExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value o, obj->eval(in));
  if (o.is_undefined()) return in.fail(offset, o.s);
  return get_attr(o, name);
}

Expected<Value> ItemExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value o, obj->eval(in));
  if (o.is_undefined()) return in.fail(offset, o.s);
  JJ_ASSIGN(Value k, index->eval(in));
  return get_item(o, k);
}

Expected<Value> SliceExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value o, obj->eval(in));
  if (o.is_undefined()) return in.fail(offset, o.s);
  Value b = Value::none(), e = Value::none(), s = Value::none();
  if (start) { JJ_ASSIGN(b, start->eval(in)); }
  if (stop) { JJ_ASSIGN(e, stop->eval(in)); }
  if (step) { JJ_ASSIGN(s, step->eval(in)); }
  if (o.is_sequence()) {
    auto pos = slice_positions(int64_t(o.list->size()), b, e, s);
    if (!pos) return in.fail(offset, pos.message());
    std::vector<Value> out;
    for (int64_t k : *pos) out.push_back((*o.list)[size_t(k)]);
    return Value::make_list(std::move(out), o.is_tuple());
  }
  if (o.kind == Kind::String) {
    std::u32string u = decode_utf8(o.s);
    auto pos = slice_positions(int64_t(u.size()), b, e, s);
    if (!pos) return in.fail(offset, pos.message());
    std::u32string out;
    for (int64_t k : *pos) out += u[size_t(k)];
    return Value::string(encode_utf8(out));
  }
  return Value::undefined(cat("'", type_name(o), "' object is not subscriptable"));
}

Expected<Value> CallExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value f, callee->eval(in));
  JJ_ASSIGN(CallArgs a, in.eval_args(args));
  return in.call(f, a, offset);
}

Expected<Value> FilterExpr::eval(Interp& in) const {
  if (!is_known_filter(name)) return in.fail(offset, cat("unsupported construct: filter '", name, "'"));
  JJ_ASSIGN(Value v, input->eval(in));
  JJ_ASSIGN(CallArgs a, in.eval_args(args));
  auto r = apply_filter(name, v, a, in);
  if (!r) return in.fail(offset, cat("filter '", name, "': ", r.message()));
  return r;
}

Expected<Value> TestExpr::eval(Interp& in) const {
  if (!is_known_test(name)) return in.fail(offset, cat("unsupported construct: test '", name, "'"));
  JJ_ASSIGN(Value v, input->eval(in));
  JJ_ASSIGN(CallArgs a, in.eval_args(args));
  auto r = apply_test(name, v, a, in);
  if (!r) return in.fail(offset, cat("test '", name, "': ", r.message()));
  return Value::boolean(*r != negated);
}

Expected<Value> UnaryExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value v, operand->eval(in));
  if (op == UnaryOp::Not) return Value::boolean(!truthy(v));
  if (v.is_undefined()) return in.fail(offset, v.s);
  if (!v.is_number()) return in.fail(offset, cat("bad operand type for unary ", op == UnaryOp::Neg ? "-" : "+", ": '", type_name(v), "'"));
  if (op == UnaryOp::Pos) return v.kind == Kind::Bool ? Value::integer(v.b) : v;
  if (v.kind == Kind::Float) return Value::number(-v.f);
  if (int_of(v) == INT64_MIN) return in.fail(offset, "integer overflow in unary '-'");
  return Value::integer(-int_of(v));
}

Expected<Value> BinaryExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value l, left->eval(in));
  if (op == BinOp::And && !truthy(l)) return l;
  if (op == BinOp::Or && truthy(l)) return l;
  JJ_ASSIGN(Value r, right->eval(in));
  if (op == BinOp::And || op == BinOp::Or) return r;
  auto res = binary_op(op, l, r);
  if (!res) return in.fail(offset, res.message());
  return res;
}

Expected<Value> CompareExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value l, first->eval(in));
  for (const auto& [op, e] : rest) {
    JJ_ASSIGN(Value r, e->eval(in));
    bool ok = false;
    switch (op) {
      case CmpOp::Eq: ok = py_equal(l, r); break;
      case CmpOp::Ne: ok = !py_equal(l, r); break;
      case CmpOp::In: case CmpOp::NotIn: {
        auto c = contains(r, l);
        if (!c) return in.fail(e->offset, c.message());
        ok = *c == (op == CmpOp::In);
        break;
      }
      default: {
        if (l.is_undefined() || r.is_undefined()) return in.fail(e->offset, l.is_undefined() ? l.s : r.s);
        bool swap = op == CmpOp::Gt || op == CmpOp::Le;
        auto less = swap ? py_less(r, l) : py_less(l, r);
        if (!less) return in.fail(e->offset, less.message());
        ok = (op == CmpOp::Lt || op == CmpOp::Gt) ? *less : !*less;
      }
    }
    if (!ok) return Value::boolean(false);
    l = std::move(r);
  }
  return Value::boolean(true);
}

Expected<Value> CondExpr::eval(Interp& in) const {
  JJ_ASSIGN(Value c, cond->eval(in));
  if (truthy(c)) return then->eval(in);
  if (otherwise) return otherwise->eval(in);
  return Value::undefined("the inline 'if' expression had no 'else' branch");
}

}  // namespace mk::jinja
