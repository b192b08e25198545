#!/usr/bin/env python3
"""Writes a Hugging Face-style model folder (config.json + model.safetensors) with random bf16 weights of a named
shape, so the whole product path (`megakernel generate`, the server) can be timed at real sizes without a
download. Weights ~ N(0, 0.02), norms 1: the logits are finite and greedy decoding runs, the text is noise.

  python3 tools/make_random_checkpoint.py llama-3.2-1b /tmp/llama-1b-random
  python3 tools/make_random_checkpoint.py llama-3.1-8b /tmp/llama-8b-random   # 16 GB
  python3 tools/make_random_checkpoint.py --pool llama-3.2-1b /tmp/llama-1b-pooled   # seconds (see below)

The file is written tensor by tensor (memory stays at one tensor). llama-3.2-1b: every matrix drawn with
torch.randn from seed 0, in the same order and bits as before. Larger shapes: drawing 8 billion normals takes
minutes, so their matrices are slices, at random offsets, of one pool of 2^24 such normals: still N(0, 0.02) and
finite, the file written at disk speed (--pool asks for that for any shape). One file of any size is fine: the loader maps it (no shards needed).
"""
import json
import os
import sys

import torch

LLAMA3_ROPE = dict(rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=8192)
SHAPES = {
    "llama-3.2-1b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                         intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
                         rope_scaling=dict(LLAMA3_ROPE, factor=32.0),
                         max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=128000,
                         eos_token_id=128001, torch_dtype="bfloat16"),
    "llama-3.1-8b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096,
                         intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0,
                         rope_scaling=dict(LLAMA3_ROPE, factor=8.0),
                         max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=128000,
                         eos_token_id=128001, torch_dtype="bfloat16"),
}
POOLED = {"llama-3.1-8b"}  # shapes whose matrices are slices of one random pool (see above)
POOL = 1 << 24


def tensor_list(cfg):
    """(name, shape, kind) in the order the matrices are drawn; kind "rnd" (random matrix) or "ones" (norm)."""
    E, F, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    t = [("model.embed_tokens.weight", (V, E), "rnd"), ("model.norm.weight", (E,), "ones")]
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", (V, E), "rnd"))
    for i in range(L):
        p = f"model.layers.{i}."
        t += [(p + "self_attn.q_proj.weight", (H * D, E), "rnd"), (p + "self_attn.k_proj.weight", (KV * D, E), "rnd"),
              (p + "self_attn.v_proj.weight", (KV * D, E), "rnd"), (p + "self_attn.o_proj.weight", (E, H * D), "rnd"),
              (p + "mlp.gate_proj.weight", (F, E), "rnd"), (p + "mlp.up_proj.weight", (F, E), "rnd"),
              (p + "mlp.down_proj.weight", (E, F), "rnd"), (p + "input_layernorm.weight", (E,), "ones"),
              (p + "post_attention_layernorm.weight", (E,), "ones")]
    return t


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def header_bytes(tensors):
    """safetensors header: 8-byte little-endian length, then JSON padded with spaces to a multiple of 8."""
    h, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        n = numel(shape) * 2
        h[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    j = json.dumps(h, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return len(j).to_bytes(8, "little") + j


def main():
    args = sys.argv[1:]
    pooled = args[:1] == ["--pool"]
    args = args[1:] if pooled else args
    if len(args) != 2 or args[0] not in SHAPES:
        sys.exit(f"usage: {sys.argv[0]} [--pool] {{{','.join(SHAPES)}}} OUT_DIR")
    shape_name, out = args
    pooled = pooled or shape_name in POOLED
    cfg = SHAPES[shape_name]
    os.makedirs(out, exist_ok=True)
    tensors = tensor_list(cfg)
    g = torch.Generator().manual_seed(0)
    pool = (torch.randn(POOL, generator=g) * 0.02).to(torch.bfloat16) if pooled else None

    def write_rnd(f, n):
        if pool is None:
            f.write((torch.randn(n, generator=g) * 0.02).to(torch.bfloat16).view(torch.int16).numpy().tobytes())
            return
        while n > 0:  # pieces of the pool from random offsets
            k = min(n, POOL // 2)
            o = int(torch.randint(0, POOL - k + 1, (1,), generator=g))
            f.write(pool[o:o + k].view(torch.int16).numpy().tobytes())
            n -= k

    path = os.path.join(out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:  # renamed when complete: a folder never holds half a file
        f.write(header_bytes(tensors))
        for _, shape, kind in tensors:
            if kind == "ones":
                f.write(torch.ones(numel(shape), dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())
            else:
                write_rnd(f, numel(shape))
    os.replace(path + ".tmp", path)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{out}: {sum(numel(s) for _, s, _ in tensors) / 1e9:.3f} B parameters")


if __name__ == "__main__":
    main()
