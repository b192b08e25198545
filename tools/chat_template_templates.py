"""Feature templates for the chat-template differential test (tools/chat_template_cases.py).

Each entry is (name, source, context_kind). Written for this project to exercise the Jinja constructs
that chat templates use; 'generic' templates are rendered with a random generic context (see
chat_template_cases.generic_context), 'chat' templates with a random conversation like the model
templates.
"""

# A Llama 3.1-style template (tools in the first user message, date_string, ipython tool results).
LLAMA31_STYLE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if tools is not defined or tools is none %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content'] | trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, respond with a JSON call.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls | length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# ChatML with a macro, loop controls and a system-first check.
CHATML_MACRO = r"""{%- macro render(role, text, suffix='<|im_end|>\n') -%}
<|im_start|>{{ role }}
{{ text }}{{ suffix }}
{%- endmacro -%}
{% for message in messages %}
{% if message.role == 'system' and not loop.first %}{{ raise_exception('System message must come first, got it at position ' ~ loop.index) }}{% endif %}
{% if message.role == 'tool' %}{% continue %}{% endif %}
{{ render(message.role, message.content | trim) }}
{%- if loop.last and message.role == 'assistant' %}{% break %}{% endif %}
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

GENERIC = [
    ("loop_vars", r"""{% for w in words %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}[{{ loop.previtem | default('-') }}|{{ loop.nextitem | default('-') }}]{{ loop.cycle('a', 'b', 'c') }} {% else %}empty{% endfor %}"""),
    ("for_filter_break", r"""{% for n in nums if n is number and n > 0 %}{{ n }}{% if n > 50 %}{% break %}{% endif %},{% else %}none{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{% for a, b in pairs %}{{ a ~ b }}{% endfor %}"""),
    ("scoping", r"""{% set x = 'outer' %}{% for w in words %}{{ x }}{% set x = w %}{{ x | length }}{% endfor %}{{ x }}{% set ns = namespace(count=0, last=none) %}{% for n in nums %}{% set ns.count = ns.count + 1 %}{% set ns.last = n %}{% endfor %}{{ ns.count }}:{{ ns.last }}{% if flag %}{% set y = 1 %}{% endif %}{{ y | default('unset') }}"""),
    ("string_methods", r"""{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip('\n ') }}|{{ s.split() }}|{{ s.split(' ', 1) }}|{{ s.rsplit(None, 1) }}|{{ s.splitlines() }}|{{ s.startswith(('a', 'h', ' ')) }}|{{ s.endswith('\n') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.replace(' ', '_') }}|{{ s.find('o') }}|{{ s.count('l') }}|{{ s.removeprefix('he') }}|{{ '-'.join(words) }}|{{ s.isspace() }}"""),
    ("slicing", r"""{{ s[::-1] }}|{{ s[1:4] }}|{{ s[-3:] }}|{{ s[:-2] }}|{{ s[::2] }}|{{ words[::-1] }}|{{ words[1:] }}|{{ words[-1:] }}|{{ nums[::-2] }}|{{ s[0] if s else 'E' }}|{{ words[100] is defined }}|{{ s[-1:-10:-3] }}|{{ nums[1:-1:2] }}"""),
    ("filters_text", r"""{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ s | title }}|{{ s | capitalize }}|{{ s | length }}|{{ s | replace('l', 'L') }}|{{ s | replace('l', '', 1) }}|{{ s | reverse }}|{{ s | list | length }}|{{ s | string }}|{{ s | e }}|{{ s | indent(2) }}|{{ s | indent(3, true, true) }}|{{ s | trim('h\n ') }}|{{ s | first | default('none') }}|{{ s | last | default('none') }}"""),
    ("filters_lists", r"""{{ words | join(', ') }}|{{ words | length }}|{{ words | first }}|{{ words | last }}|{{ words | reverse | list }}|{{ words | sort }}|{{ words | sort(reverse=true, case_sensitive=true) }}|{{ words | unique | list }}|{{ nums | sum }}|{{ nums | min }}|{{ nums | max }}|{{ people | map(attribute='name') | join('/') }}|{{ people | selectattr('score', 'gt', 5) | map(attribute='name') | list }}|{{ people | rejectattr('active') | list | length }}|{{ people | sort(attribute='score') | map(attribute='score') | list }}|{{ nums | select('odd') | list }}|{{ nums | reject('divisibleby', 3) | list }}|{{ words | map('upper') | list }}|{{ people | selectattr('active') | first | default('x') }}"""),
    ("filters_numbers", r"""{{ x }}|{{ x | round }}|{{ x | round(2) }}|{{ x | round(1, 'floor') }}|{{ x | int }}|{{ n | float }}|{{ -n | abs }}|{{ x | abs }}|{{ '42' | int }}|{{ '3.7' | int }}|{{ 'abc' | int(7) }}|{{ '2.5' | float }}|{{ n / 3 }}|{{ n // 3 }}|{{ n % 3 }}|{{ -n // 4 }}|{{ -n % 4 }}|{{ n ** 2 }}|{{ 2 ** 0.5 }}|{{ x * n }}|{{ 0.1 + 0.2 }}|{{ 1e20 * x }}|{{ x / 1e7 }}|{{ n + true }}|{{ 7 / 2 }}|{{ 4 / 2 }}"""),
    ("tests", r"""{% for v in [s, n, x, none, true, false, words, d, people, undefined_name] %}{{ v is defined }}{{ v is none }}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is boolean }}{{ v is true }}{{ v is false }};{% endfor %}|{{ n is even }}{{ n is odd }}{{ n is divisibleby 3 }}{{ s is lower }}{{ s is upper }}{{ n is eq 3 }}{{ 'a' is in words }}{{ n is gt 2 }}{{ n is le 2 }}{{ none is sameas none }}{{ 'trim' is filter }}{{ 'odd' is test }}{{ s is not none }}"""),
    ("repr_and_json", r"""{{ words }}|{{ d }}|{{ nums }}|{{ (1, 'a') }}|{{ (s,) }}|{{ [none, true, 1.5, -0.0, 1e-7, 12345678901234567.0] }}|{{ d | tojson }}|{{ people | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ words | tojson(separators=(',', ':')) }}|{{ s | tojson }}|{{ s | tojson(ensure_ascii=true) }}|{{ d | items | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('zz', 'dflt') }}|{{ d.get('a') }}"""),
    ("operators", r"""{{ 1 < n < 10 }}|{{ n == 3 or s }}|{{ s and n }}|{{ not s }}|{{ 'o' in s }}|{{ 'zz' not in s }}|{{ n in nums }}|{{ 'a' in d }}|{{ s ~ n ~ none ~ true ~ x }}|{{ words + ['z'] }}|{{ s * 2 }}|{{ [0] * 3 }}|{{ 'y' if flag else 'n' }}|{{ 'y' if flag }}|{{ (n > 2) + 1 }}|{{ -(n) }}|{{ +x }}|{{ s != 'hello' }}|{{ [1, 2] == [1, 2] }}|{{ (1, 2) == [1, 2] }}|{{ d == {'a': 1} }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ words < ['m'] }}"""),
    ("blocks_whitespace", "{# comment #}\n  {% set greeting %}Hi {{ s | trim }}!{% endset %}\n  {{ greeting }}\n{% filter upper %}shout {{ words | join(' ') }}{% endfilter %}\n{% with a = n, b = 2 %}{{ a * b }}{% endwith %}\n    {%+ if flag %}  kept-indent{% endif +%}\n{% raw %}{{ not rendered }} {% if %}{% endraw %}\n{%- for w in words -%}\n   [{{ w }}]\n{%- endfor %}\n\t{% if true %}\n    indented line\n\t{% endif %}\n{{- '  strip-left' }}\n{{ 'strip-right' -}}   \n\n after\n  {#- trimmed comment -#}  \nend\n"),
    ("macros", r"""{% macro item(name, value='?', sep=': ') %}{{ name }}{{ sep }}{{ value }}{% endmacro %}{% macro wrap(x) %}<{{ caller_missing | default('') }}{{ x }}>{% endmacro %}{{ item('a') }}|{{ item('b', n) }}|{{ item('c', sep='=', value=s | trim) }}|{% for w in words %}{{ wrap(item(w, loop.index)) }}{% endfor %}"""),
    ("undefined", r"""[{{ missing }}][{{ missing | default('dflt') }}][{{ missing | length }}][{{ missing is defined }}][{{ d.nokey }}][{{ d.nokey is defined }}][{{ d['nokey'] | default('x') }}][{{ words[99] }}][{% for x in missing %}{{ x }}{% else %}no-iter{% endfor %}][{{ missing ~ 'cat' }}][{{ missing == missing }}][{{ none | default('not-used') }}][{{ '' | default('empty', true) }}][{{ 'a' in missing }}]"""),
    ("generators", r"""{% set g = nums | select('odd') %}{{ g | list }}{{ g | list }}|{% if words | select('eq', 'zz') %}truthy{% endif %}|{{ d.items() }}|{{ d.keys() }}|{{ d.values() | list }}|{{ d.items() | length }}|{{ words | reverse | join(',') }}|{{ (nums | map('abs')) | first | default('none') }}|{% for k, v in d | items %}{{ k }}{% endfor %}|{{ (d | items) is sequence }}{{ d.keys() is sequence }}{{ nums is sequence }}|{{ people | map(attribute='name') | unique | list }}"""),
    ("generator_errors", r"""{% if n > 6 %}{{ words | map('upper') | tojson }}{% elif n > 4 %}{{ nums | select('even') | length }}{% elif n > 2 %}{{ d.items() | tojson }}{% elif n == 1 %}{{ nums | select('odd') | last }}{% elif n == 0 %}{{ words | reverse }}{% endif %}"""),
    ("errors", r"""{% if n > 5 %}{{ raise_exception('n too big: ' ~ n) }}{% elif n == 0 %}{{ missing.attr }}{% elif n == 1 %}{{ s + 1 }}{% elif n == 2 %}{{ 1 / 0 }}{% elif n == 3 %}{{ words.append(1) }}{% else %}fine {{ n }}{% endif %}"""),
]

CHAT = [
    ("llama31_style", LLAMA31_STYLE),
    ("chatml_macro", CHATML_MACRO),
]
