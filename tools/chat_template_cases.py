#!/usr/bin/env python3
"""Differential test of our chat-template interpreter against Python's jinja2.

Renders random conversations with the Llama 3 and Qwen3 templates (their tokenizer_config.json, read from REAL_DATA)
and our own feature templates (tools/chat_template_templates.py) in the environment transformers uses for
apply_chat_template -- jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
loopcontrols, its tojson / raise_exception / strftime_now / namespace / dict -- and compares with our
renderer (the chat_template_render driver, tests/chat/driver/).

  check  --renderer BUILD/chat_template_render [--n N] [--seed S]   live comparison (ctest runs this)
  golden [--n N] [--seed S] [--out tests/chat/data/golden.json]      expected renderings for test_chat

A case passes when both render the same text, or both fail (and a raise_exception message matches). The one
deliberate difference: jinja2 prints generators and functions as object addresses; we fail instead.
"""
import argparse
import datetime
import json
import os
import random
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_templates as feature  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "chat", "data")
# Real tokenizer_config.json files stay outside the repository (licence): $MK_TOKENIZER_DATA/<model>/ or
# ../shared/data/tokenizers/<model>/ beside the checkout. Models whose file is absent are skipped, and said so.
REAL_DATA = os.environ.get("MK_TOKENIZER_DATA", os.path.join(ROOT, "..", "shared", "data", "tokenizers"))
ALL_MODELS = ("llama3", "qwen3")
MODELS = tuple(m for m in ALL_MODELS if os.path.exists(os.path.join(REAL_DATA, m, "tokenizer_config.json")))
for _m in ALL_MODELS:
    if _m not in MODELS:
        print(f"SKIP {_m}: {os.path.join(REAL_DATA, _m, 'tokenizer_config.json')} not found (set MK_TOKENIZER_DATA)")


# ---------------------------------------------------------------- the environment transformers builds
class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without tracking: {% generation %}body{% endgeneration %}."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError("underscore-prefixed namespace attribute")
        jinja2.utils.Namespace.__init__(self, attrs)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = TemplateNamespace
    return env


def special_token(config, key):
    v = config.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def load_model(name):
    with open(os.path.join(REAL_DATA, name, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return {"template": config["chat_template"], "bos_token": special_token(config, "bos_token"),
            "eos_token": special_token(config, "eos_token")}


def alias_reasoning(message):
    for key in ("reasoning_content", "thinking", "reasoning"):
        if message.get(key) is not None:
            r = message[key]
            return {"thinking": r, **message, "reasoning_content": r}
    return message


def chat_context(case):
    """The context transformers' render_jinja_template passes (mirrored by mk::render_chat)."""
    ctx = {"messages": [alias_reasoning(m) for m in case["messages"]], "tools": None, "documents": None,
           "add_generation_prompt": case["add_generation_prompt"]}
    for key in ("bos_token", "eos_token"):
        if case.get(key) is not None:
            ctx[key] = case[key]
    ctx.update(case.get("extra") or {})
    return ctx


def render_reference(env, case, cache):
    src = case["template"]
    try:
        if src not in cache:
            cache[src] = env.from_string(src)
        ctx = case["context"] if "context" in case else chat_context(case)
        return {"ok": True, "text": cache[src].render(**ctx)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"ok": False, "error": f"syntax: {e}"}
    except Exception as e:  # noqa: BLE001 - any failure of the reference is an expected failure
        return {"ok": False, "error": f"{type(e).__name__}: {e}",
                "raised": str(e) if type(e) is jinja2.exceptions.TemplateError else None}


# ---------------------------------------------------------------- random inputs
TEXTS = [
    "", " ", "hello", "Hello, world!", "  padded both sides  ", "line1\nline2", "\n\nleading newlines",
    "trailing newlines\n\n", "tabs\tand\r\ncarriage", "quotes ' and \" mixed", "it's", 'say "hi"',
    "back\\slash \\n not a newline", "unicode: héllo wörld ñ", "CJK: 你好，世界", "emoji 😀👍🏽 family 👨‍👩‍👧",
    "combining e\u0301 and a\u0308", "{{ not a template }} {% if %}", "\u2028line sep\u2029para sep",
    "ctrl \x00\x01\x1f\x7f", "nbsp\xa0here\u3000ideographic", "ÜPPER Ünïcödé", "x" * 300, "numbers 1 2.5 -3e4",
    "<tool_response>\nresult 42\n</tool_response>", "<tool_response>not closed", "```python\nprint('hi')\n```",
    "Ελληνικά και Кириллица", "مرحبا بالعالم", "   ", "\n", "end with space ", "🚀",
]
THINK = [
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "<think>short</think>answer",
    "<think>\n\n</think>\n\n", "pre </think> post", "no think tags here", "<think>a</think>b</think>c",
    "\n<think>\nmulti\nline\n</think>\n\n\nfinal\n",
]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, in °C",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                                          "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search\nthe web",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]


def rtext(rng):
    if rng.random() < 0.15:
        return rng.choice(TEXTS) + rng.choice(TEXTS)
    return rng.choice(TEXTS)


def tool_call(rng):
    args = rng.choice([{"city": "Paris"}, {"city": "Zürich", "days": 3}, {}, '{"raw": "string args"}',
                       {"nested": {"list": [1, 2.5, None, True], "s": "q\"uote"}}])
    call = {"name": rng.choice(["get_weather", "search"]), "arguments": args}
    return {"type": "function", "function": call} if rng.random() < 0.8 else call


def conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rtext(rng)})
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.1:
            msgs.append({"role": "user", "content": "<tool_response>\n" + rtext(rng) + "\n</tool_response>"})
        else:
            msgs.append({"role": "user", "content": rtext(rng)})
        r = rng.random()
        if r < 0.55:
            msg = {"role": "assistant", "content": rng.choice(THINK) if rng.random() < 0.4 else rtext(rng)}
            if rng.random() < 0.15:
                msg["reasoning_content"] = rtext(rng)
            msgs.append(msg)
        elif r < 0.7:
            msgs.append({"role": "assistant", "content": rtext(rng),
                         "tool_calls": [tool_call(rng) for _ in range(rng.randint(1, 2))]})
            for _ in range(rng.randint(1, 2)):
                msgs.append({"role": "tool", "content": rtext(rng)})
            msgs.append({"role": "assistant", "content": rtext(rng)})
    if rng.random() < 0.05 and msgs:
        msgs.append({"role": "system", "content": "late system"})
    return msgs


def chat_case(rng, model, template):
    case = {"model": model, **template, "messages": conversation(rng),
            "add_generation_prompt": rng.random() < 0.6, "extra": {}}
    if rng.random() < 0.7:
        case["extra"]["enable_thinking"] = rng.random() < 0.5
    if rng.random() < 0.2:
        case["extra"]["tools"] = TOOLS[: rng.randint(1, 2)]
    case["extra"]["date_string"] = "26 Jul 2024"
    if rng.random() < 0.2:
        case["extra"]["tools_in_user_message"] = rng.random() < 0.5
    if not case["messages"] and rng.random() < 0.8:
        case["messages"] = [{"role": "user", "content": rtext(rng)}]
    return case


def generic_context(rng):
    words = [rng.choice(["apple", "Banana", "cherry", "a", "Zed", "mango", "ß", "éclair", "kiwi", "APPLE"])
             for _ in range(rng.randint(0, 5))]
    nums = [rng.choice([rng.randint(-5, 99), rng.randint(0, 9)]) for _ in range(rng.randint(0, 6))]
    people = [{"name": rng.choice(["ann", "Bob", "cy", "Dee"]), "score": rng.randint(0, 10),
               "active": rng.random() < 0.5} for _ in range(rng.randint(0, 4))]
    return {"s": rtext(rng), "words": words, "nums": nums, "n": rng.randint(0, 9),
            "x": rng.choice([0.5, 2.675, -1.25, 3.14159, 1e-5, 12.0, 0.1, 1234567.891, 2.5]),
            "flag": rng.random() < 0.5, "d": rng.choice([{}, {"a": 1}, {"b": [1, 2], "a": "x", "é": None}]),
            "people": people, "pairs": [["k", 1], ["j", 2]][: rng.randint(0, 2)]}


def make_cases(n, seed):
    rng = random.Random(seed)
    models = {m: load_model(m) for m in MODELS}
    cases = []
    for i in range(n):
        r = i % 10
        if r < 3 and "llama3" in models:
            cases.append(chat_case(rng, "llama3", models["llama3"]))
        elif 3 <= r < 7 and "qwen3" in models:
            cases.append(chat_case(rng, "qwen3", models["qwen3"]))
        elif r < 8:  # a feature template (also in place of an absent real one)
            name, src = rng.choice(feature.CHAT)
            tokens = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
            cases.append(chat_case(rng, name, {"template": src, **tokens}))
        else:
            name, src = feature.GENERIC[(i // 10) % len(feature.GENERIC)]
            cases.append({"model": name, "template": src, "context": generic_context(rng)})
    return cases


# ---------------------------------------------------------------- comparing
def run_renderer(renderer, cases):
    payload = json.dumps({"cases": cases}, ensure_ascii=False).encode("utf-8")
    proc = subprocess.run([renderer], input=payload, capture_output=True, timeout=120)
    if proc.returncode != 0:
        sys.exit(f"renderer failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout.decode("utf-8"))


def same(ref, ours):
    # jinja2 prints generators and functions as "<... object at 0x...>", an address: we refuse to print
    # them (an error), or print something else where they sit inside a printed list or tuple.
    if ref["ok"] and " at 0x" in ref["text"]:
        return not ours["ok"] and "cannot print" in ours["error"] or ours["ok"]
    if ref["ok"] != ours["ok"]:
        return False
    if ref["ok"]:
        return ref["text"] == ours["text"]
    return ref.get("raised") is None or ref["raised"] in ours["error"]


def cmd_check(args):
    cases = make_cases(args.n, args.seed)
    env, cache = make_env(), {}
    refs = [render_reference(env, c, cache) for c in cases]
    ours = run_renderer(args.renderer, cases)
    bad = [i for i, (r, o) in enumerate(zip(refs, ours)) if not same(r, o)]
    per_model = {}
    for c, r in zip(cases, refs):
        ok, err = per_model.get(c["model"], (0, 0))
        per_model[c["model"]] = (ok + r["ok"], err + (not r["ok"]))
    print(f"{len(cases)} cases (seed {args.seed}); per template (rendered, errors): {per_model}")
    for i in bad[:5]:
        c = {k: v for k, v in cases[i].items() if k != "template"}
        print(f"--- MISMATCH case {i}: {json.dumps(c, ensure_ascii=False)[:1500]}")
        print(f"jinja2: {json.dumps(refs[i], ensure_ascii=False)[:1500]}")
        print(f"ours:   {json.dumps(ours[i], ensure_ascii=False)[:1500]}")
    if bad:
        print(f"FAILED: {len(bad)} of {len(cases)} cases differ")
        return 1
    print("OK: all cases match jinja2")
    return 0


def cmd_golden(args):
    cases = make_cases(args.n, args.seed)
    env, cache = make_env(), {}
    out, templates = [], {}
    for c in cases:
        ref = render_reference(env, c, cache)
        entry = {k: v for k, v in c.items() if k not in ("template", "bos_token", "eos_token")}
        if c["model"] not in MODELS:  # model templates come from the real tokenizer_config.json
            templates[c["model"]] = {"template": c["template"], "bos_token": c.get("bos_token"),
                                     "eos_token": c.get("eos_token")}
        if ref["ok"] and " at 0x" in ref["text"]:  # printed generator or function: we fail (see `same`)
            ref = {"ok": False, "error": "printed a generator"}
        entry["expected"] = {"ok": ref["ok"], "text": ref.get("text"), "raised": ref.get("raised")}
        out.append(entry)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/chat_template_cases.py golden", "jinja2": jinja2.__version__,
                   "seed": args.seed, "templates": templates, "cases": out}, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(out)} cases to {args.out}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--renderer", required=True)
    c.add_argument("--n", type=int, default=400)
    c.add_argument("--seed", type=int, default=7)
    g = sub.add_parser("golden")
    g.add_argument("--n", type=int, default=200)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--out", default=os.path.join(DATA, "golden.json"))
    args = p.parse_args()
    return cmd_check(args) if args.cmd == "check" else cmd_golden(args)


if __name__ == "__main__":
    sys.exit(main())
