#!/usr/bin/env python3
"""Differential test: `megakernel tokenize` against the Python package `tokenizers`.

For each tokenizer (the real Llama 3 and Qwen3 files when present, plus small ones trained here that use
every added-token flag and other pre-tokenizer shapes) it encodes a varied corpus and a few thousand random
strings from a fixed seed, and decodes random id lists. Ids must match exactly; decode, decode with
skip_special and the streaming decoder must equal tokenizers' decode. Invalid UTF-8 is compared with
tokenizers on bytes.decode("utf-8", "replace") (our documented rule).

usage: differential_test.py MEGAKERNEL_BINARY [--data DIR] [--random N] [--seed S]
DIR defaults to $MK_TOKENIZER_DATA or <repo>/../shared/data/tokenizers."""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

try:
    from tokenizers import Tokenizer
except ImportError:
    sys.exit("FAIL: the Python package `tokenizers` is missing (pip install -r requirements-test.txt)")

import synthetic_tokenizers  # noqa: E402


def run_ours(binary, folder, requests):
    """Runs the hidden --jsonl mode once over every request; returns one dict per request."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
        path = f.name
    try:
        p = subprocess.run([binary, "tokenize", "--tokenizer", folder, "--jsonl", path], capture_output=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise RuntimeError(f"megakernel exited with {p.returncode}: {p.stderr.decode(errors='replace')}")
    lines = p.stdout.decode().splitlines()
    if len(lines) != len(requests):
        raise RuntimeError(f"megakernel printed {len(lines)} lines for {len(requests)} requests")
    return [json.loads(line) for line in lines]


def random_id_lists(rng, n_vocab, n):
    out = []
    for _ in range(n):
        k = rng.choice([1, 2, 3, 7, 20])
        out.append([rng.randrange(-2, n_vocab + 3) if rng.random() < 0.05 else rng.randrange(n_vocab)
                    for _ in range(k)])
    return out


def check(name, folder, binary, texts, rng):
    ref = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    n_vocab = ref.get_vocab_size(with_added_tokens=True)
    id_lists = random_id_lists(rng, n_vocab, 300)
    requests = [{"hex": t.hex()} for t in texts] + [{"ids": ids} for ids in id_lists]
    ours = run_ours(binary, folder, requests)
    failures = []

    def fail(what, case, got, want):
        failures.append(f"[{name}] {what} for {case!r}:\n    ours: {got}\n    tokenizers: {want}")

    real = not name.startswith("syn_")
    for raw, o in zip(texts, ours[:len(texts)]):
        text = raw.decode("utf-8", "replace")
        want = ref.encode(text, add_special_tokens=False).ids
        if o["ids"] != want:
            fail("ids", text, o["ids"], want)
            continue
        decoded = bytes.fromhex(o["decoded_hex"]).decode("utf-8")
        if decoded != ref.decode(want, skip_special_tokens=False):
            fail("decode", text, decoded, ref.decode(want, skip_special_tokens=False))
        # Round trip (real files only: their added tokens are ASCII, so byte-level decoding is lossless).
        # (With a normalizer, text is normalized between added tokens only: compare the normalized forms.)
        norm = ref.normalizer.normalize_str if ref.normalizer else (lambda x: x)
        if real and decoded != text and norm(decoded) != norm(text):
            fail("round trip", text, decoded, text)
        if bytes.fromhex(o["stream_hex"]) != bytes.fromhex(o["decoded_hex"]):
            fail("stream decode", text, bytes.fromhex(o["stream_hex"]), bytes.fromhex(o["decoded_hex"]))
        skip = bytes.fromhex(o["decoded_skip_hex"]).decode("utf-8")
        if skip != ref.decode(want, skip_special_tokens=True):
            fail("decode(skip_special)", text, skip, ref.decode(want, skip_special_tokens=True))
    for ids, o in zip(id_lists, ours[len(texts):]):
        for key, skip in (("decoded_hex", False), ("decoded_skip_hex", True)):
            got = bytes.fromhex(o[key]).decode("utf-8")
            want = ref.decode([i for i in ids if i >= 0], skip_special_tokens=skip) if all(i >= 0 for i in ids) \
                else None
            if want is not None and got != want:
                fail(f"decode(skip_special={skip})", ids, got, want)
        if o["stream_hex"] != o["decoded_hex"]:
            fail("stream decode", ids, o["stream_hex"], o["decoded_hex"])
    print(f"{name}: {len(texts)} texts, {len(id_lists)} id lists, {len(failures)} failures")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    here = os.path.dirname(os.path.abspath(__file__))
    default_data = os.environ.get("MK_TOKENIZER_DATA",
                                  os.path.join(here, "..", "..", "..", "shared", "data", "tokenizers"))
    ap.add_argument("--data", default=default_data)
    ap.add_argument("--random", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    texts = corpus.cases(args.random, args.seed)
    rng = random.Random(args.seed)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        training = [t.decode("utf-8", "replace") for t in texts]
        tokenizers_to_test = synthetic_tokenizers.build(tmp, training)
        for name in ("llama3", "qwen3"):
            folder = os.path.join(args.data, name)
            if os.path.isfile(os.path.join(folder, "tokenizer.json")):
                tokenizers_to_test[name] = folder
            else:
                print(f"SKIP {name}: no tokenizer.json in {os.path.abspath(folder)} (set MK_TOKENIZER_DATA)")
        for name, folder in tokenizers_to_test.items():
            failures += check(name, folder, args.binary, texts, rng)
    for f in failures[:20]:
        print(f)
    if failures:
        print(f"FAIL: {len(failures)} mismatches")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
