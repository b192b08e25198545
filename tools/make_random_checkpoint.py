#!/usr/bin/env python3
"""Writes a Hugging Face-style model folder (config.json + model.safetensors) with random bf16 weights of a named
shape, so the whole product path (`megakernel generate`, the server) can be timed at real sizes without a
download. Weights ~ N(0, 0.02), norms 1: the logits are finite and greedy decoding runs, the text is noise.

  python3 tools/make_random_checkpoint.py llama-3.2-1b /tmp/llama-1b-random
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

SHAPES = {
    "llama-3.2-1b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                         intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=8192),
                         max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=128000,
                         eos_token_id=128001, torch_dtype="bfloat16"),
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(SHAPES)}}} OUT_DIR")
    cfg, out = SHAPES[sys.argv[1]], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    E, F, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": rnd(V, E), "model.norm.weight": torch.ones(E, dtype=torch.bfloat16)}
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = rnd(V, E)
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rnd(H * D, E)
        t[p + "self_attn.k_proj.weight"] = rnd(KV * D, E)
        t[p + "self_attn.v_proj.weight"] = rnd(KV * D, E)
        t[p + "self_attn.o_proj.weight"] = rnd(E, H * D)
        t[p + "mlp.gate_proj.weight"] = rnd(F, E)
        t[p + "mlp.up_proj.weight"] = rnd(F, E)
        t[p + "mlp.down_proj.weight"] = rnd(E, F)
        t[p + "input_layernorm.weight"] = torch.ones(E, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = torch.ones(E, dtype=torch.bfloat16)
    save_file(t, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{out}: {sum(x.numel() for x in t.values()) / 1e9:.3f} B parameters")


if __name__ == "__main__":
    main()
