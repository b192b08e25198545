#!/usr/bin/env python3
"""PyTorch peers on the same GPU, measured the way /work/shared/peers/decode_bench.py measures them, and a ratio
table against our numbers (the JSON of `megakernel bench --json`).

Engines (batch 1, greedy, bf16, random weights of the named shape, 32-token prompt, 128 new tokens; ms/token
excludes prefill):
  eager      transformers generate(), dynamic cache; a streamer syncs and stamps the host clock per token,
             decode = (t[last] - t[first generated]) / 127
  hfcompile  the same with cache_implementation="static" (transformers compiles the decode step with
             torch.compile mode "reduce-overhead", i.e. CUDA graphs)
  gptfast    a minimal gpt-fast-style loop: fused wqkv / w13, static KV cache, decode step compiled with
             torch.compile(mode="reduce-overhead", fullgraph=True); CUDA events around the 127 decode steps

Each (engine, shape) runs in its own child process under its own time limit (--limits), so one slow peer (a
torch.compile that takes minutes) cannot use up the time of the others; a peer that runs out of time is listed as
such. Ours: both figures of `megakernel bench` (median of per-token times with an event between graph replays, and
the back-to-back mean, which is how the gpt-fast-style loop is timed).

Usage: python3 bench/compare_torch.py --ours ours.json [--shapes llama-3.2-1b,llama-3.1-8b] [--modes eager,hfcompile,gptfast]
       [--limits gptfast=60,eager=30,hfcompile=90] [--reps N]
Prints 'RESULT {json}' lines and a final table; --out writes all results as JSON.
"""
import os
import signal
import subprocess
import argparse
import json
import math
import statistics
import sys
import time
import traceback

PROMPT, NEW = 32, 128

# name -> (family, hidden, layers, ffn, heads, kv_heads, head_dim, vocab, tied, rope_theta, llama3_factor)
SHAPES = {
    "llama-3.2-1b": ("llama", 2048, 16, 8192, 32, 8, 64, 128256, True, 500000.0, 32.0),
    "llama-3.1-8b": ("llama", 4096, 32, 14336, 32, 8, 128, 128256, False, 500000.0, 8.0),
    "qwen3-0.6b": ("qwen3", 1024, 28, 3072, 16, 8, 128, 151936, True, 1000000.0, None),
    "qwen3-1.7b": ("qwen3", 2048, 28, 6144, 16, 8, 128, 151936, True, 1000000.0, None),
}


def emit(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def weight_bytes(name):
    fam, H, L, I, Hq, Hkv, D, V, tied, _, _ = SHAPES[name]
    per_layer = H * Hq * D + 2 * H * Hkv * D + Hq * D * H + 3 * H * I + 2 * H + (2 * D if fam == "qwen3" else 0)
    return 2 * (L * per_layer + H + V * H)


def hf_config(name):
    fam, H, L, I, Hq, Hkv, D, V, tied, theta, factor = SHAPES[name]
    common = dict(hidden_size=H, num_hidden_layers=L, intermediate_size=I, num_attention_heads=Hq,
                  num_key_value_heads=Hkv, head_dim=D, vocab_size=V, tie_word_embeddings=tied,
                  max_position_embeddings=131072 if fam == "llama" else 40960, hidden_act="silu",
                  pad_token_id=None)
    if fam == "llama":
        from transformers import LlamaConfig as Cfg
        rs = dict(rope_type="llama3", factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=8192)
        common.update(rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001)
    else:
        from transformers import Qwen3Config as Cfg
        rs = dict(rope_type="default")
        common.update(rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151645)
    try:
        return Cfg(**common, rope_parameters=dict(rs, rope_theta=theta))
    except TypeError:
        return Cfg(**common, rope_theta=theta, rope_scaling=rs if fam == "llama" else None)


def hf_model(name):
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            m = AutoModelForCausalLM.from_config(hf_config(name), torch_dtype=torch.bfloat16)
    finally:
        torch.set_default_dtype(old)
    return m.eval().requires_grad_(False)


class Stamp:
    def __init__(self):
        self.t = []

    def put(self, value):
        import torch
        torch.cuda.synchronize()
        self.t.append(time.perf_counter())

    def end(self):
        pass


def hf_timing(model, ids, reps, warmups=2, **gen_kwargs):
    import torch
    from transformers import GenerationConfig
    gc = GenerationConfig(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0,
                          bos_token_id=None, **gen_kwargs)
    per_tok = []
    for i in range(warmups + reps):
        st = Stamp()
        torch.cuda.synchronize()
        with torch.inference_mode():
            out = model.generate(ids, generation_config=gc, streamer=st, attention_mask=torch.ones_like(ids))
        assert out.shape[1] - ids.shape[1] == NEW
        tt = st.t[len(st.t) - NEW:]
        if i >= warmups:
            per_tok.append((tt[-1] - tt[0]) / (NEW - 1) * 1e3)
    return statistics.median(per_tok)


def run_hf(name, modes, results, reps=None):
    import torch
    model = hf_model(name)
    ids = torch.randint(0, SHAPES[name][7], (1, PROMPT), device="cuda", generator=None)
    if "eager" in modes:
        try:
            ms = hf_timing(model, ids, reps=reps or 3, warmups=1)  # nothing to compile: one warm-up
            results.append(dict(engine="hf-eager", model=name, ms_per_token=ms))
            emit(**results[-1])
        except Exception:
            traceback.print_exc()
    if "hfcompile" in modes:
        try:
            kw = dict(cache_implementation="static")
            try:
                from transformers import CompileConfig
                kw["compile_config"] = CompileConfig(fullgraph=True, mode="reduce-overhead", dynamic=False)
            except Exception:
                pass
            ms = hf_timing(model, ids, reps=reps or 5, **kw)
            results.append(dict(engine="hf-static-compile", model=name, ms_per_token=ms))
            emit(**results[-1])
        except Exception:
            traceback.print_exc()
    del model
    torch.cuda.empty_cache()


def gf_model(name, max_seq):
    """gpt-fast-style model: fused projections, static cache, rotate-half RoPE, q/k norm for Qwen3."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    fam, H, L, I, Hq, Hkv, D, V, tied, theta, factor = SHAPES[name]
    eps = 1e-5 if fam == "llama" else 1e-6

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return (x.float() * cos + torch.cat((-x2, x1), dim=-1).float() * sin).to(x.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wqkv = nn.Parameter(torch.empty((Hq + 2 * Hkv) * D, H))
            self.wo = nn.Parameter(torch.empty(H, Hq * D))
            self.w13 = nn.Parameter(torch.empty(2 * I, H))
            self.w2 = nn.Parameter(torch.empty(H, I))
            self.n1 = nn.Parameter(torch.ones(H))
            self.n2 = nn.Parameter(torch.ones(H))
            self.qn = nn.Parameter(torch.ones(D))
            self.kn = nn.Parameter(torch.ones(D))
            self.register_buffer("kc", torch.zeros(1, Hkv, max_seq, D))
            self.register_buffer("vc", torch.zeros(1, Hkv, max_seq, D))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Parameter(torch.empty(V, H))
            self.out = self.tok if tied else nn.Parameter(torch.empty(V, H))
            self.layers = nn.ModuleList(Block() for _ in range(L))
            self.norm = nn.Parameter(torch.ones(H))
            inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
            if factor:
                wl = 2 * math.pi / inv
                smooth = (8192 / wl - 1.0) / 3.0
                sc = torch.where(wl > 8192, inv / factor, inv)
                mid = (wl <= 8192) & (wl >= 2048)
                inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, sc)
            f = torch.outer(torch.arange(max_seq, dtype=torch.float64), inv)
            emb = torch.cat((f, f), dim=-1)
            self.register_buffer("cos", emb.cos().float(), persistent=False)
            self.register_buffer("sin", emb.sin().float(), persistent=False)
            self.register_buffer("mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)), persistent=False)

        def forward(self, idx, pos):
            x = F.embedding(idx, self.tok)
            B, T, _ = x.shape
            cos, sin = self.cos[pos][None, :, None, :], self.sin[pos][None, :, None, :]
            mask = self.mask[pos][None, None]
            for b in self.layers:
                q, k, v = F.linear(rms(x, b.n1), b.wqkv).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
                q, k, v = q.view(B, T, Hq, D), k.view(B, T, Hkv, D), v.view(B, T, Hkv, D)
                if fam == "qwen3":
                    q, k = rms(q, b.qn), rms(k, b.kn)
                q = rope(q, cos, sin).transpose(1, 2)
                k = rope(k, cos, sin).transpose(1, 2)
                b.kc.index_copy_(2, pos, k)
                b.vc.index_copy_(2, pos, v.transpose(1, 2))
                rep = Hq // Hkv
                y = F.scaled_dot_product_attention(q, b.kc.repeat_interleave(rep, 1), b.vc.repeat_interleave(rep, 1),
                                                   attn_mask=mask)
                x = x + F.linear(y.transpose(1, 2).reshape(B, T, -1), b.wo)
                g, u = F.linear(rms(x, b.n2), b.w13).chunk(2, dim=-1)
                x = x + F.linear(F.silu(g) * u, b.w2)
            return F.linear(rms(x, self.norm), self.out)

    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            m = Model()
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return m.eval().requires_grad_(False)


def run_gptfast(name, results, reps=None):
    reps = reps or 5
    import torch
    max_seq = PROMPT + NEW
    model = gf_model(name, max_seq)

    def step(m, tok, pos):
        return m(tok, pos)[:, -1].argmax(-1, keepdim=True)

    step_c = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    prompt = torch.randint(0, SHAPES[name][7], (1, PROMPT), device="cuda")

    def generate():
        with torch.inference_mode():
            cur = model(prompt, torch.arange(PROMPT, device="cuda"))[:, -1].argmax(-1, keepdim=True)
            pos = torch.tensor([PROMPT], device="cuda", dtype=torch.long)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(1, NEW):
                cur = step_c(model, cur, pos).clone()
                pos += 1
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / (NEW - 1)

    t0 = time.perf_counter()
    per_tok = [generate() for _ in range(3 + reps)][3:]
    ms = statistics.median(per_tok)
    results.append(dict(engine="gptfast-compile", model=name, ms_per_token=ms, wall_s=time.perf_counter() - t0))
    emit(**results[-1])
    del model
    torch.cuda.empty_cache()


def ours_by_model(path):
    """model -> (median ms/token, back-to-back ms/token) of the default layered variant at the shortest context."""
    if not path:
        return {}, None
    with open(path) as f:
        j = json.load(f)
    out = {}
    for m in j.get("models", []):
        for d in m.get("decode", []):
            if d.get("variant", "graph+pdl") == "graph+pdl" and d["context"] <= 64:
                out[m["model"]] = (d["ms_per_token"], d.get("ms_per_token_back_to_back", d.get("ms_per_token_mean")))
    return out, j.get("read_tbps_used")


def run_child(engine, name, reps):
    """One engine on one shape, in this process (the parent's child)."""
    results = []
    if engine == "gptfast":
        print(f"== {name}: {weight_bytes(name) / 1e9:.4f} GB of weights per token", flush=True)
        run_gptfast(name, results, reps)
    else:
        run_hf(name, [engine], results, reps)
    if not results:
        sys.exit(1)


def run_limited(engine, name, limit, reps):
    """Runs one peer in a child process (its own session, so that torch.compile's workers end with it)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, "--shapes", name]
    if reps:
        cmd += ["--reps", str(reps)]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        status = "ok" if p.returncode == 0 else f"exit {p.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the child's own process group (start_new_session)
        out, _ = p.communicate()
        status = f"timeout after {limit:.0f} s"
    sys.stdout.write(out)
    found = [json.loads(l[len("RESULT "):]) for l in out.splitlines() if l.startswith("RESULT ")]
    wall = time.perf_counter() - t0
    if found:
        for r in found:
            r["wall_s"] = round(wall, 1)
        return found
    print(f"== {engine} {name}: no result ({status}, {wall:.0f} s)", flush=True)
    return [dict(engine=engine, model=name, ms_per_token=None, status=status, wall_s=round(wall, 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="JSON of `megakernel bench --json`")
    ap.add_argument("--shapes", default="llama-3.2-1b,llama-3.1-8b")
    ap.add_argument("--modes", default="eager,hfcompile,gptfast")
    ap.add_argument("--limits", default="gptfast=90,eager=60,hfcompile=150",
                    help="seconds per (engine, shape) child process, e.g. gptfast=60,eager=30,hfcompile=90")
    ap.add_argument("--reps", type=int, default=0, help="timed repeats per peer (0: the defaults, 3-5)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    names = a.shapes.split(",")
    for name in names:
        if name not in SHAPES:
            sys.exit(f"compare_torch.py: unknown shape {name} (known: {', '.join(SHAPES)})")
    if a.child:
        run_child(a.child, names[0], a.reps)
        return
    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    modes = a.modes.split(",")
    limits = {k: float(v) for k, v in (x.split("=") for x in a.limits.split(",") if x)}
    for m in modes:
        if m not in ("eager", "hfcompile", "gptfast"):
            sys.exit(f"compare_torch.py: unknown mode {m} (known: eager, hfcompile, gptfast)")
    results = []
    # The gpt-fast-style loop first (the strongest peer), then transformers.
    for engine in [m for m in ("gptfast", "eager", "hfcompile") if m in modes]:
        for name in names:
            results += run_limited(engine, name, limits.get(engine, 120.0), a.reps)
    ours, read_tbps = ours_by_model(a.ours)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(results=results, ours=ours, read_tbps=read_tbps), f, indent=1)
    print(f"\n{'model':14s} {'engine':18s} {'ms/token':>9s} {'TB/s':>6s} {'ours median':>11s} {'ours b2b':>9s}"
          f" {'peer/ours median':>16s} {'peer/ours b2b':>13s}")
    for r in results:
        o = ours.get(r["model"])
        if r["ms_per_token"] is None:
            print(f"{r['model']:14s} {r['engine']:18s} {r['status']}")
            continue
        tb = weight_bytes(r["model"]) / (r["ms_per_token"] * 1e-3) / 1e12
        if o:
            print(f"{r['model']:14s} {r['engine']:18s} {r['ms_per_token']:9.3f} {tb:6.2f} {o[0]:11.4f} {o[1]:9.4f}"
                  f" {r['ms_per_token'] / o[0]:16.2f} {r['ms_per_token'] / o[1]:13.2f}")
        else:
            print(f"{r['model']:14s} {r['engine']:18s} {r['ms_per_token']:9.3f} {tb:6.2f}")


if __name__ == "__main__":
    main()
