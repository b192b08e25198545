#!/usr/bin/env python3
"""Mutation fuzzing of our chat-template interpreter against jinja2.

Takes the Llama 3 / Qwen3 templates and the feature templates of tools/chat_template_templates.py, mutates
them at random (delete, duplicate or swap chunks, insert Jinja punctuation and keywords), renders each mutant
with jinja2 (the transformers environment of chat_template_cases.py) and with our renderer, and requires:
the renderer never crashes; where jinja2 renders, we render the same text (or fail naming an unsupported
construct); where jinja2 fails, we fail.

  chat_template_fuzz.py --renderer BUILD/chat_template_render [--n 500] [--seed 1]
"""
import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_cases as cases  # noqa: E402
import chat_template_templates as feature  # noqa: E402

PIECES = ["{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}", "'", '"', "|", ".", ",",
          ":", "~", " if ", " else ", " endif ", " for ", " in ", " endfor ", " set ", " not ", " and ", " or ",
          " is ", " defined ", " none ", "loop.", "\n", " ", "\\", "0", "1", "-1", "::", "trim", "length"]


def mutate(rng, src):
    s = src
    for _ in range(rng.randint(1, 3)):
        if not s:
            break
        i = rng.randrange(len(s))
        j = min(len(s), i + rng.randint(1, 12))
        op = rng.random()
        if op < 0.3:
            s = s[:i] + s[j:]
        elif op < 0.5:
            s = s[:i] + s[i:j] + s[i:]
        elif op < 0.7:
            k = rng.randrange(len(s))
            s = s[:k] + s[i:j] + s[k:]
        else:
            s = s[:i] + rng.choice(PIECES) + s[i:]
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--renderer", required=True)
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    models = [cases.load_model(m) for m in cases.MODELS]
    sources = [(m["template"], m) for m in models] + [(src, None) for _, src in feature.CHAT]
    generic = [src for _, src in feature.GENERIC]
    batch = []
    for i in range(args.n):
        if i % 3 == 2:
            batch.append({"model": "generic", "template": mutate(rng, rng.choice(generic)),
                          "context": cases.generic_context(rng)})
        else:
            src, model = rng.choice(sources)
            tokens = model or {"bos_token": "<s>", "eos_token": "</s>"}
            c = cases.chat_case(rng, "chat", {**tokens, "template": src})
            c["template"] = mutate(rng, src)
            batch.append(c)
    env, cache = cases.make_env(), {}
    refs = [cases.render_reference(env, c, cache) for c in batch]
    ours = cases.run_renderer(args.renderer, batch)  # exits non-zero if the renderer crashed
    # Where jinja2 renders and we refuse with an error naming an unsupported construct, that is by design.
    unsupported = [i for i, (r, o) in enumerate(zip(refs, ours))
                   if r["ok"] and not o["ok"] and "unsupported construct" in o["error"]]
    bad = [i for i, (r, o) in enumerate(zip(refs, ours)) if not cases.same(r, o) and i not in unsupported]
    n_ok = sum(r["ok"] for r in refs)
    print(f"{len(batch)} mutants (seed {args.seed}): jinja2 rendered {n_ok}, failed {len(batch) - n_ok}; "
          f"we refused {len(unsupported)} as unsupported constructs")
    for i in bad[:5]:
        print(f"--- MISMATCH {i}: template {json.dumps(batch[i]['template'], ensure_ascii=False)[:2000]}")
        print(f"jinja2: {json.dumps(refs[i], ensure_ascii=False)[:800]}")
        print(f"ours:   {json.dumps(ours[i], ensure_ascii=False)[:800]}")
    if bad:
        print(f"FAILED: {len(bad)} mutants differ")
        return 1
    print("OK: no crash, every mutant agrees with jinja2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
