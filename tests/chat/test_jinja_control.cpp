// Control flow, scoping and whitespace control of the Jinja interpreter (trim_blocks + lstrip_blocks as
// transformers configures jinja2). Expected strings are what jinja2 renders.
#include "chat_test_util.h"

using mk::testing::render;

TEST(JinjaControl, IfElifElse) {
  const char* src = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(render(src, R"({"n": 3})"), "big");
  EXPECT_EQ(render(src, R"({"n": 2})"), "two");
  EXPECT_EQ(render(src, R"({"n": 1})"), "small");
}

TEST(JinjaControl, OptionalColonBeforeABody) {
  EXPECT_EQ(render("{% if true: %}a{% else: %}b{% endif %}{% for x in [1]: %}{{ x }}{% endfor %}"), "a1");
}

TEST(JinjaControl, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.length }}{{ loop.first }}{{ loop.last }}{{ loop.cycle('p', 'q') }}|"
                   "{% endfor %}"),
            "10323TrueFalsep|21213FalseFalseq|32103FalseTruep|");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }},"
                   "{% endfor %}"),
            "-2,13,2-,");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'x': 1} %}{{ k }}{% endfor %}"), "[h][é]x");
}

TEST(JinjaControl, ForElseFilterAndLoopControls) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }}{% endfor %}"), "2/24/2");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
  // jinja2 runs `else` unless some iteration reached the end of its body.
  EXPECT_EQ(render("{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}"), "1E");
  EXPECT_EQ(render("{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"), "12");
}

TEST(JinjaControl, ScopingLikeJinja2) {
  // set inside a loop is local to the iteration; namespaces carry state out.
  EXPECT_EQ(render("{% set x = 'o' %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
            "[o]1[o]2o");
  EXPECT_EQ(render("{% set ns = namespace(n=0, last=none) %}{% for i in [4, 5] %}{% set ns.n = ns.n + i %}"
                   "{% set ns.last = i %}{% endfor %}{{ ns.n }} {{ ns.last }}"),
            "9 5");
  EXPECT_EQ(render("{% if true %}{% set y = 1 %}{% endif %}{{ y }}"), "1");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set msgs = messages[1:] %}{{ msgs | length }}", R"({"messages": [1, 2, 3]})"), "2");
  EXPECT_EQ(render("{% set blk %}x{{ 1 + 1 }}{% endset %}{{ blk }}|{% set up | upper %}abc{% endset %}{{ up }}"),
            "x2|ABC");
  EXPECT_EQ(render("{% with a = 2 %}{{ a }}{% endwith %}[{{ a }}]|{% filter upper %}hi {{ 'x' }}{% endfilter %}"),
            "2[]|HI X");
}

TEST(JinjaControl, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"),
            "<1B><12><43>");
  // A macro sees globals and top-level variables, not the caller's loop variables.
  EXPECT_EQ(render("{% set top = 'T' %}{% macro m() %}{{ top }}{{ i }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}"),
            "T");
}

TEST(JinjaControl, WhitespaceControl) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before a block tag goes.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("x\n  {{- 'y' -}}\n  z"), "xyz");
  EXPECT_EQ(render("  {%+ if true %}k{% endif +%}\nz"), "  k\nz");
  EXPECT_EQ(render("a {# note #}\n  {#- gone -#}  b"), "a b");
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("line\r\nnext\rlast\n"), "line\nnext\nlast");  // newlines normalised, one trailing dropped
  EXPECT_EQ(render("  {{ 'v' }}\n"), "  v");                     // lstrip_blocks leaves {{ }} alone
}

TEST(JinjaControl, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(render("[{{ nope }}][{{ nope | length }}][{{ nope is defined }}][{% for x in nope %}x{% endfor %}]"
                   "[{{ nope == nope }}][{{ 'a' in nope }}][{{ nope | default('d') }}][{{ not nope }}]"),
            "[][0][False][][True][False][d][True]");
}
