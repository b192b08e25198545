#!/usr/bin/env python3
"""Encode speed of our tokenizer against the Python package `tokenizers` on the same text, in one run.

usage: tokenizer_bench.py BUILD/tokenizer_bench [--tokenizer DIR ...] [--file TEXT] [--mb 3] [--repeat 5]

Without --file it builds a ~3 MB mixed text (English licence texts from /usr/share/common-licenses, Python
source from the standard library, and a deterministic multilingual/emoji/number filler). Both sides encode
the whole text in one call on one thread (tokenizers parallelises only across a batch); the first run has a
cold cache, the figure reported is the median of the next `repeat` runs. Ids are compared (count + hash)."""
import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

from tokenizers import Tokenizer


def build_text(mb):
    parts, size = [], 0
    sources = sorted(glob.glob("/usr/share/common-licenses/*")) + \
        sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    rng = random.Random(0)
    filler = ["中文文本测试，你好世界。", "日本語のテキスト。", "Привет, мир! ", "😀👍🏽👨‍👩‍👧 ", "3.14159 2024-06-01 1234567 ",
              "café naïve résumé ", "\n\n    ", "I'm sure they'll say we'd've "]
    for path in sources:
        if size >= mb * 1e6:
            break
        try:
            with open(path, encoding="utf-8") as f:
                t = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(t)
        parts.append("".join(rng.choice(filler) for _ in range(50)))
        size += len(t.encode())
    return "".join(parts)


def fnv1a(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.environ.get("MK_TOKENIZER_DATA", os.path.join(here, "..", "..", "shared", "data", "tokenizers"))
    ap.add_argument("--tokenizer", action="append")
    ap.add_argument("--file")
    ap.add_argument("--mb", type=float, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dirs = args.tokenizer or [os.path.join(data, n) for n in ("llama3", "qwen3")]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if not path:
            path = os.path.join(tmp, "text.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(build_text(args.mb))
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        n_bytes = len(text.encode())
        for d in dirs:
            ref = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            runs, cpu_runs, ids = [], [], None
            for _ in range(args.repeat + 1):
                t0, c0 = time.perf_counter(), time.process_time()
                ids = ref.encode(text, add_special_tokens=False).ids
                runs.append(time.perf_counter() - t0)
                cpu_runs.append(time.process_time() - c0)
            theirs = n_bytes / 1e6 / statistics.median(runs[1:])
            theirs_cpu = n_bytes / 1e6 / statistics.median(cpu_runs[1:])
            theirs_cold = n_bytes / 1e6 / runs[0]
            out = subprocess.run([args.binary, "--tokenizer", d, "--file", path, "--repeat", str(args.repeat)],
                                 capture_output=True, text=True, check=True).stdout
            ours = json.loads(out)
            same = ours["tokens"] == len(ids) and ours["ids_fnv1a"] == fnv1a(ids)
            print(f"{os.path.basename(d)}: {n_bytes / 1e6:.2f} MB, {len(ids)} tokens, ids identical: {same}")
            print(f"  megakernel  {ours['mb_per_s_warm']:8.2f} MB/s wall (cold {ours['mb_per_s_cold']:.2f}), "
                  f"{ours['mb_per_cpu_s_warm']:8.2f} MB per CPU-s, load {ours['load_s']:.2f} s")
            print(f"  tokenizers  {theirs:8.2f} MB/s wall (cold {theirs_cold:.2f}), {theirs_cpu:8.2f} MB per CPU-s")
            print(f"  ratio       {ours['mb_per_s_warm'] / theirs:8.2f}x wall, "
                  f"{ours['mb_per_cpu_s_warm'] / theirs_cpu:.2f}x CPU time")
            if not same:
                sys.exit("ids differ")


if __name__ == "__main__":
    main()
