#!/usr/bin/env python3
"""End-to-end test of `megakernel generate` / `chat` on the committed golden models (tests/golden/).

- Greedy ids from --prompt-ids match the continuations Hugging Face transformers produced (expected.json),
  cut after the first EOS id of generation_config.json (the golden runs do not stop at EOS).
- An EOS id set in generation_config.json stops generation right after that token.
- Same --seed gives the same sampled ids; another seed other ids.
- -v prints the start-up and request timings on stderr and leaves stdout alone.
- Bad input (missing folder, bad --prompt-ids, prompt too long, bad flags) exits 1 with a message.
- With the real Llama 3 tokenizer (../shared/data/tokenizers/llama3, skipped with a note when absent):
  --prompt text gives the golden ids (BOS added), the streamed text equals tokenizers' decode, a stop
  string cuts the text, and `chat` answers piped turns.

Usage: cli_e2e.py MEGAKERNEL_BINARY [REPO_ROOT]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.argv[1]).resolve()
ROOT = Path(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]).resolve()
GOLDEN = ROOT / "tests" / "golden"
LLAMA3_TOK = ROOT.parent / "shared" / "data" / "tokenizers" / "llama3"
failures = []


def run(*args, stdin=None):
    p = subprocess.run([str(BIN), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120)
    if p.returncode < 0:
        failures.append(f"{' '.join(map(str, args))}: killed by signal {-p.returncode}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def last_json_line(p):
    lines = p.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def expected_until_eos(greedy, eos):
    for i, t in enumerate(greedy):
        if t in eos:
            return greedy[: i + 1]
    return greedy


def test_greedy_matches_transformers():
    n = 0
    for exp_file in sorted(GOLDEN.glob("*/expected.json")):
        exp = json.loads(exp_file.read_text())
        for case in exp["cases"]:
            ids = ",".join(map(str, case["prompt"]))
            p = run("generate", "--model", exp_file.parent, "--prompt-ids", ids, "-n", len(case["greedy"]), "--ids")
            want = expected_until_eos(case["greedy"], set(exp["eos_token_ids"]))
            if check(p.returncode == 0, f"{exp_file.parent.name}: exit {p.returncode}: {p.stderr}"):
                got = last_json_line(p)
                check(got == want, f"{exp_file.parent.name} prompt {case['prompt'][:6]}...: got {got}, want {want}")
            n += 1
    check(n >= 3, f"only {n} golden cases found under {GOLDEN}")
    print(f"greedy vs transformers: {n} cases")


def test_other_backends():
    """Every registered backend that runs here gives the same greedy ids (the megakernel simulator on CPU;
    CUDA ones when this machine has a GPU build and a GPU)."""
    for name in ("llama3_tied_bf16", "llama_gqa2_f16"):
        exp = json.loads((GOLDEN / name / "expected.json").read_text())
        case = exp["cases"][1]
        ids = ",".join(map(str, case["prompt"]))
        p = run("generate", "--model", GOLDEN / name, "--prompt-ids", ids, "-n", 12, "--ids", "--backend", "megakernel-sim")
        check(p.returncode == 0 and last_json_line(p) == case["greedy"],
              f"{name} megakernel-sim: got {p.stdout!r} {p.stderr}, want {case['greedy']}")
    p = run("generate", "--model", GOLDEN / "llama_f32", "--prompt-ids", "1", "--backend", "warp-drive")
    check(p.returncode == 1 and "available: reference" in p.stderr, f"unknown backend: {p.stderr!r}")
    print("megakernel-sim backend: ok")


def test_eos_from_generation_config():
    src = GOLDEN / "llama_f32"
    case = json.loads((src / "expected.json").read_text())["cases"][1]
    greedy = case["greedy"]
    k = next(i for i in range(2, len(greedy)) if greedy[i] not in greedy[:i])
    with tempfile.TemporaryDirectory() as d:
        for f in ("config.json", "model.safetensors"):
            os.symlink(src / f, Path(d) / f)
        gen = json.loads((src / "generation_config.json").read_text())
        gen["eos_token_id"] = [greedy[k]]
        (Path(d) / "generation_config.json").write_text(json.dumps(gen))
        p = run("generate", "--model", d, "--prompt-ids", ",".join(map(str, case["prompt"])), "-n", 12, "--ids")
        check(p.returncode == 0 and last_json_line(p) == greedy[: k + 1],
              f"EOS {greedy[k]}: got {p.stdout!r} {p.stderr}, want {greedy[:k + 1]}")
        p = run("generate", "--model", d, "--prompt-ids", ",".join(map(str, case["prompt"])), "-n", 12, "--ids",
                "--ignore-eos")
        check(p.returncode == 0 and last_json_line(p) == greedy, f"--ignore-eos: got {p.stdout!r}")
    print("EOS from generation_config.json: ok")


def test_seeded_sampling():
    base = ["generate", "--model", GOLDEN / "llama_f32", "--prompt-ids", "1,2,3", "-n", 16, "--ids", "--temp", "1.0",
            "--top-p", "0.95", "--top-k", "50"]
    a, b, c = run(*base, "--seed", 5), run(*base, "--seed", 5), run(*base, "--seed", 6)
    check(a.returncode == 0 and a.stdout == b.stdout, f"same seed, different ids: {a.stdout!r} vs {b.stdout!r} {a.stderr}")
    check(a.stdout != c.stdout, f"seeds 5 and 6 gave the same ids {a.stdout!r}")
    greedy = run("generate", "--model", GOLDEN / "llama_f32", "--prompt-ids", "1,2,3", "-n", 16, "--ids")
    check(a.stdout != greedy.stdout, "temperature 1 gave the greedy ids")
    print("seeded sampling: ok")


def test_verbose_timings():
    # -v: timings on stderr only (start-up split into the model folder and the backend, then the request's);
    # stdout stays the ids alone.
    plain = run("generate", "--model", GOLDEN / "llama_f32", "--prompt-ids", "1,2,3", "-n", 4, "--ids")
    p = run("generate", "--model", GOLDEN / "llama_f32", "--prompt-ids", "1,2,3", "-n", 4, "--ids", "-v")
    lines = p.stderr.splitlines()
    check(p.returncode == 0 and p.stdout == plain.stdout, f"-v changed stdout: {p.stdout!r} vs {plain.stdout!r}")
    check(len(lines) >= 2 and lines[0].startswith("[cpu] start-up ") and "model folder" in lines[0]
          and "backend" in lines[0] and "ms to first token" in lines[1], f"-v stderr: {p.stderr!r}")
    print("verbose timings: ok")


def test_errors():
    model = GOLDEN / "llama_f32"
    cases = [
        (["generate", "--model", ROOT / "no-such-model", "--prompt-ids", "1"], "does not exist"),
        (["generate", "--model", model, "--prompt-ids", "1,x"], "not a token id"),
        (["generate", "--model", model, "--prompt-ids", ""], "no token ids"),
        (["generate", "--model", model, "--prompt-ids", "1,100000"], "expected an id in [0,"),
        (["generate", "--model", model, "--prompt-ids", "1,2", "-n", "100000"], "exceeds the max context"),
        (["generate", "--model", model, "--prompt-ids", "1,2", "-n", "20", "--max-context", "8"], "exceeds the max context of 8"),
        (["generate", "--model", model, "--prompt", "hi"], "no tokenizer.json"),
        (["generate", "--model", model, "--prompt-ids", "1", "--top-p", "0"], "top_p"),
        (["generate", "--model", model, "--prompt-ids", "1", "--device", "tpu"], "unknown device"),
        (["generate", "--model", model], "--prompt"),
        (["chat", "--model", model], "no tokenizer.json"),
        (["generate", "--model", GOLDEN, "--prompt-ids", "1"], "config.json"),
    ]
    for args, needle in cases:
        p = run(*args)
        check(p.returncode == 1 and needle in p.stderr,
              f"{' '.join(map(str, args))}: exit {p.returncode}, stderr {p.stderr!r} (wanted 1 and {needle!r})")
    p = run("generate", "--model", model, "--prompt-ids", "1", "--device", "cuda")
    check(p.returncode == 0 or (p.returncode == 1 and "CUDA" in p.stderr), f"--device cuda: {p.returncode} {p.stderr!r}")
    print(f"errors: {len(cases) + 1} cases")


def test_text_with_llama3_tokenizer():
    if not (LLAMA3_TOK / "tokenizer.json").exists():
        print(f"SKIP text tests: no Llama 3 tokenizer at {LLAMA3_TOK}")
        return
    model = GOLDEN / "llama3_vocab_bf16"
    exp = json.loads((model / "expected.json").read_text())
    try:
        from tokenizers import Tokenizer
        ref = Tokenizer.from_file(str(LLAMA3_TOK / "tokenizer.json"))
    except ImportError:
        ref = None
        print("note: Python tokenizers missing; text decode not compared")
    for i, case in enumerate(c for c in exp["cases"] if "text" in c):
        common = ["generate", "--model", model, "--tokenizer", LLAMA3_TOK, "--prompt", case["text"], "-n", 12]
        p = run(*common, "--ids")
        check(p.returncode == 0 and last_json_line(p) == case["greedy"],
              f"--prompt {case['text']!r}: got {p.stdout!r} {p.stderr}, want {case['greedy']}")
        if i > 0:  # text and stop strings on the first case only (each run loads the 9 MB tokenizer)
            continue
        t = run(*common)
        check(t.returncode == 0, f"text run failed: {t.stderr}")
        if ref is not None:
            want = ref.decode(case["greedy"], skip_special_tokens=True)
            got = t.stdout[:-1] if t.stdout.endswith("\n") and not want.endswith("\n") else t.stdout
            check(got == want, f"streamed text {got!r} != decode {want!r}")
            if len(want) > 6:  # a stop string from the middle of the text: only what precedes it is printed
                stop = want[len(want) // 2: len(want) // 2 + 3]
                s = run(*common, "--stop", stop)
                cut = want[: want.find(stop)]
                out = s.stdout[:-1] if s.stdout.endswith("\n") and not cut.endswith("\n") else s.stdout
                check(s.returncode == 0 and out == cut, f"--stop {stop!r}: got {s.stdout!r}, want {cut!r}")
    p = run("chat", "--model", model, "--tokenizer", LLAMA3_TOK, "-n", 6,
            stdin="Hello!\nAnd again?\n/reset\nNew start\n/exit\nnot read\n")
    check(p.returncode == 0 and len(p.stdout.splitlines()) == 3, f"chat: exit {p.returncode}, {p.stdout!r} {p.stderr!r}")
    print("text with the Llama 3 tokenizer: ok")


if __name__ == "__main__":
    if not BIN.exists():
        sys.exit(f"no megakernel binary at {BIN}")
    for t in (test_greedy_matches_transformers, test_other_backends, test_eos_from_generation_config, test_seeded_sampling, test_verbose_timings, test_errors,
              test_text_with_llama3_tokenizer):
        t()
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)
