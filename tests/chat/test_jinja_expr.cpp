// Expressions of the Jinja interpreter: literals, arithmetic with Python semantics, comparisons, string
// methods, filters, tests, slicing and Python-style printing. Expected strings are what jinja2 prints.
#include "chat_test_util.h"

using mk::testing::render;

TEST(JinjaExpr, LiteralsAndPrinting) {
  EXPECT_EQ(render("{{ 'a\\nb\\'\\u00e9\\x41' }}"), "a\nb'\xC3\xa9" "A");
  EXPECT_EQ(render("{{ \"dq\" 'concat' }}"), "dqconcat");
  EXPECT_EQ(render("{{ none }}{{ None }}{{ true }}{{ False }}"), "NoneNoneTrueFalse");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.0] }}"), "[1, 'a', None, True, 1.0]");
  EXPECT_EQ(render("{{ {'a': [1], \"b\": {}} }}"), "{'a': [1], 'b': {}}");
  EXPECT_EQ(render("{{ (1, 'x') }}{{ (1,) }}{{ () }}"), "(1, 'x')(1,)()");
  EXPECT_EQ(render("{{ [\"it's\", 'say \"x\"', 'both \\' \"'] }}"), "[\"it's\", 'say \"x\"', 'both \\' \"']");
  EXPECT_EQ(render("{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }}"), "1000 31 5 15 1500.0");
}

TEST(JinjaExpr, FloatsPrintLikePython) {
  EXPECT_EQ(render("{{ 1/2 }} {{ 4/2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.5e20 }}"),
            "0.5 2.0 1e+16 1000000000000000.0 0.0001 1e-05 1.5e+20");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1/3 }} {{ -0.0 }} {{ 2 ** 0.5 }}"),
            "0.30000000000000004 0.3333333333333333 -0.0 1.4142135623730951");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }}"), "3 -4 1 2 -2 1024");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** -1 }}"), "7 9 4 0.5");
  EXPECT_EQ(render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 2 * 'x' }} {{ [1] + [2] }} {{ 'a' + 'b' }}"), "ababab [1, 1] xx [1, 2] ab");
  EXPECT_EQ(render("{{ 1 ~ 'a' ~ none ~ true ~ 1.5 ~ undefined_var }}"), "1aNoneTrue1.5");
  EXPECT_EQ(render("{{ true + 1 }} {{ 3 - 1.5 }}"), "2 1.5");
}

TEST(JinjaExpr, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ (1, 2) == [1, 2] }}"),
            "True False True True False");
  EXPECT_EQ(render("{{ 'a' in 'cab' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not [] }}"), "x b  True");
  EXPECT_EQ(render("{{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}"), "n||True True");
}

TEST(JinjaExpr, AttributesItemsAndSlices) {
  const char* ctx = R"({"m": {"role": "user", "items": 5, "nested": {"k": [10, 20, 30]}}, "s": "héllo"})";
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ m.nested.k[1] }} {{ m.nested.k[-1] }} {{ m.nested.k.0 }}", ctx),
            "user user 20 30 10");
  EXPECT_EQ(render("{{ m['items'] }} {{ m.items() | list | length }}", ctx), "5 3");
  EXPECT_EQ(render("{{ s[::-1] }} {{ s[1:3] }} {{ s[-2:] }} {{ s | length }} {{ s[1] }}", ctx), "olléh él lo 5 é");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3][-1:0:-1] }} {{ [1, 2][5:] }}"), "[1, 3, 5] [3, 2] []");
  EXPECT_EQ(render("[{{ m.missing }}][{{ m.nested.k[9] }}]", ctx), "[][]");
}

TEST(JinjaExpr, StringMethods) {
  const char* ctx = R"({"s": "  a b  c \n"})";
  EXPECT_EQ(render("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' \\na') }}", ctx),
            "a b  c|a b  c \n|  a b  c|b  c");
  EXPECT_EQ(render("{{ s.split() }}|{{ s.split(' ') }}|{{ s.split(None, 1) }}|{{ s.rsplit(None, 1) }}", ctx),
            "['a', 'b', 'c']|['', '', 'a', 'b', '', 'c', '\\n']|['a', 'b  c \\n']|['  a b', 'c']");
  EXPECT_EQ(render("{{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ 'abc'.startswith(('z', 'a')) }} "
                   "{{ 'abc'.endswith('bc') }} {{ 'héllo'.find('l') }} {{ 'a-b'.replace('-', '+') }} "
                   "{{ ','.join(['a', 'b']) }} {{ 'hello world'.title() }} {{ 'ABC'.lower() }}"),
            "z True True 2 a+b a,b Hello World abc");
  EXPECT_EQ(render("{{ 'straße'.upper() }} {{ 'ÀÉ'.lower() }}"), "STRASSE àé");
}

TEST(JinjaExpr, Filters) {
  const char* ctx = R"({"w": ["b", "A", "c"], "p": [{"n": "x", "s": 3}, {"n": "y", "s": 1}], "d": {"z": 1, "a": 2}})";
  EXPECT_EQ(render("{{ '  t  ' | trim }}|{{ 'ab' | upper }}|{{ w | length }}|{{ w | join('-') }}|{{ w | first }}|"
                   "{{ w | last }}|{{ w | sort }}|{{ w | reverse | list }}", ctx),
            "t|AB|3|b-A-c|b|c|['A', 'b', 'c']|['c', 'A', 'b']");
  EXPECT_EQ(render("{{ p | map(attribute='n') | join }}|{{ p | selectattr('s', 'gt', 2) | list | length }}|"
                   "{{ p | sort(attribute='s') | map(attribute='n') | list }}|{{ d | dictsort }}|{{ d | items | list }}",
                   ctx),
            "xy|1|['y', 'x']|[('a', 2), ('z', 1)]|[('z', 1), ('a', 2)]");
  EXPECT_EQ(render("{{ x | default('d') }}|{{ '' | default('d', true) }}|{{ '3.7' | int }}|{{ 'q' | int(5) }}|"
                   "{{ 2.5 | round }}|{{ 3.14159 | round(2) }}|{{ -3 | abs }}|{{ [3, 1] | sum }}|{{ 'a<b' | e }}"),
            "d|d|3|5|2.0|3.14|3|4|a&lt;b");
  EXPECT_EQ(render("{{ 'one\\ntwo' | indent(2) }}|{{ 'a-b c' | title }}|{{ 'x' | replace('x', 'y') }}"),
            "one\n  two|A-B C|y");
}

TEST(JinjaExpr, TojsonMatchesJsonDumps) {
  const char* ctx = R"({"t": {"name": "f", "args": {"b": [1, 2.5, null, true], "a": "é\"\n"}}})";
  EXPECT_EQ(render("{{ t | tojson }}", ctx), R"({"name": "f", "args": {"b": [1, 2.5, null, true], "a": "é\"\n"}})");
  EXPECT_EQ(render("{{ t.args | tojson(sort_keys=true, ensure_ascii=true) }}", ctx),
            R"({"a": "\u00e9\"\n", "b": [1, 2.5, null, true]})");
  EXPECT_EQ(render("{{ t.args.b | tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(render("{{ [] | tojson(indent=2) }}{{ {} | tojson }}{{ 'x' | tojson(separators=(',', ':')) }}"), "[]{}\"x\"");
}

TEST(JinjaExpr, Tests) {
  const char* ctx = R"({"m": {"a": null, "s": "x", "n": 3, "f": 1.5, "l": [1]}})";
  EXPECT_EQ(render("{{ m.a is none }}{{ m.a is defined }}{{ m.zz is defined }}{{ m.zz is undefined }}"
                   "{{ m.s is string }}{{ m.n is number }}{{ m.n is integer }}{{ m.f is float }}{{ m is mapping }}"
                   "{{ m.l is iterable }}{{ m.n is odd }}{{ m.n is divisibleby 3 }}{{ m.s is not none }}"
                   "{{ true is true }}{{ 0 is false }}{{ m.n is eq 3 }}{{ 1 is in m.l }}", ctx),
            "TrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrue");
}

// map/select/items/reverse... give one-shot generators as in jinja2: always truthy, no length, not JSON,
// empty once consumed; dict.items()/keys()/values() are views that print as dict_items([...]).
TEST(JinjaExpr, GeneratorsAndDictViews) {
  const char* ctx = R"({"n": [1, 2, 3], "d": {"a": 1}})";
  EXPECT_EQ(render("{% set g = n | select('odd') %}{{ g | list }}{{ g | list }}", ctx), "[1, 3][]");
  EXPECT_EQ(render("{% if n | select('gt', 9) %}truthy{% endif %}", ctx), "truthy");
  EXPECT_EQ(render("{{ d.items() }} {{ d.keys() }} {{ d.values() | list }} {{ d.items() | length }}", ctx),
            "dict_items([('a', 1)]) dict_keys(['a']) [1] 1");
  EXPECT_EQ(render("{{ n | reverse | list }} {{ n | map('string') | join('-') }} {{ n | select('even') | first }}", ctx),
            "[3, 2, 1] 1-2-3 2");
  EXPECT_NE(mk::testing::error_of("{{ n | map('abs') | tojson }}", ctx).find("Object of type generator"), std::string::npos);
  EXPECT_NE(mk::testing::error_of("{{ d.items() | tojson }}", ctx).find("Object of type dict_items"), std::string::npos);
  EXPECT_NE(mk::testing::error_of("{{ n | select('odd') | length }}", ctx).find("has no len()"), std::string::npos);
  EXPECT_NE(mk::testing::error_of("{{ n | reverse }}", ctx).find("cannot print a generator"), std::string::npos);
}
