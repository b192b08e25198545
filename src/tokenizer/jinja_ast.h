// Syntax tree of the Jinja interpreter: expressions evaluate to Values, statements append to the output.
// Built by jinja_parser*.cpp, evaluated by jinja_eval*.cpp. Every node keeps the byte offset of its first
// token, so errors name line:column.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja_value.h"

namespace mk::jinja {

class Interp;

struct Expr {
  uint32_t offset = 0;
  virtual ~Expr() = default;
  virtual Expected<Value> eval(Interp& in) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Keyword {
  std::string name;
  ExprPtr value;
};
struct Args {  // call arguments as written
  std::vector<ExprPtr> positional;
  std::vector<Keyword> keyword;
};

struct ConstExpr : Expr { Value value; Expected<Value> eval(Interp& in) const override; };
struct NameExpr : Expr { std::string name; Expected<Value> eval(Interp& in) const override; };
struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  bool tuple = false;
  Expected<Value> eval(Interp& in) const override;
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Expected<Value> eval(Interp& in) const override;
};
struct AttrExpr : Expr {  // obj.name
  ExprPtr obj;
  std::string name;
  Expected<Value> eval(Interp& in) const override;
};
struct ItemExpr : Expr {  // obj[index]
  ExprPtr obj, index;
  Expected<Value> eval(Interp& in) const override;
};
struct SliceExpr : Expr {  // obj[start:stop:step], each part optional
  ExprPtr obj, start, stop, step;
  Expected<Value> eval(Interp& in) const override;
};
struct CallExpr : Expr {
  ExprPtr callee;
  Args args;
  Expected<Value> eval(Interp& in) const override;
};
struct FilterExpr : Expr {  // input | name(args)
  ExprPtr input;
  std::string name;
  Args args;
  Expected<Value> eval(Interp& in) const override;
};
struct TestExpr : Expr {  // input is [not] name(args)
  ExprPtr input;
  std::string name;
  bool negated = false;
  Args args;
  Expected<Value> eval(Interp& in) const override;
};
enum class UnaryOp : uint8_t { Neg, Pos, Not };
struct UnaryExpr : Expr {
  UnaryOp op;
  ExprPtr operand;
  Expected<Value> eval(Interp& in) const override;
};
enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat, And, Or };
struct BinaryExpr : Expr {
  BinOp op;
  ExprPtr left, right;
  Expected<Value> eval(Interp& in) const override;
};
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };
struct CompareExpr : Expr {  // a < b <= c: chained like Python
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
  Expected<Value> eval(Interp& in) const override;
};
struct CondExpr : Expr {  // then if cond else otherwise (otherwise optional: undefined)
  ExprPtr then, cond, otherwise;
  Expected<Value> eval(Interp& in) const override;
};

// ---- statements ----
enum class Flow : uint8_t { Normal, Break, Continue };

struct Stmt {
  uint32_t offset = 0;
  virtual ~Stmt() = default;
  virtual Expected<Flow> exec(Interp& in) const = 0;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt { std::string text; Expected<Flow> exec(Interp& in) const override; };
struct OutputStmt : Stmt { ExprPtr expr; Expected<Flow> exec(Interp& in) const override; };
struct IfStmt : Stmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif ...
  Body otherwise;
  Expected<Flow> exec(Interp& in) const override;
};
struct ForStmt : Stmt {
  std::vector<std::string> targets;  // `for a, b in ...` unpacks
  ExprPtr iter, filter;              // filter: `for x in y if cond`
  Body body, otherwise;
  Expected<Flow> exec(Interp& in) const override;
};
// Assignment target: names (unpacked when several) or namespace attribute `ns.attr`.
struct SetTarget {
  std::vector<std::string> names;
  std::string attr;  // non-empty: names[0].attr
};
struct SetStmt : Stmt {
  SetTarget target;
  ExprPtr value;
  Expected<Flow> exec(Interp& in) const override;
};
struct FilterCall {
  uint32_t offset = 0;
  std::string name;
  Args args;
};
struct SetBlockStmt : Stmt {  // {% set x %}...{% endset %}, optionally `| filter`
  SetTarget target;
  std::vector<FilterCall> filters;
  Body body;
  Expected<Flow> exec(Interp& in) const override;
};
struct FilterBlockStmt : Stmt {  // {% filter upper %}...{% endfilter %}
  std::vector<FilterCall> filters;
  Body body;
  Expected<Flow> exec(Interp& in) const override;
};
struct BreakStmt : Stmt { bool is_continue = false; Expected<Flow> exec(Interp& in) const override; };
struct ScopeStmt : Stmt {  // {% with a = 1 %}...{% endwith %} and {% generation %}...{% endgeneration %}
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  bool new_scope = true;
  Body body;
  Expected<Flow> exec(Interp& in) const override;
};
struct MacroStmt : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
  Expected<Flow> exec(Interp& in) const override;
};

struct Template {
  std::string source;  // newline-normalised source (for positions)
  Body body;
};

// Parses `source` (raw template text). Errors name the construct and line:column.
Expected<std::shared_ptr<Template>> parse_template(std::string_view source);

}  // namespace mk::jinja
