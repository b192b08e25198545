#!/usr/bin/env python3
"""Golden data for the CPU reference forward pass, made with Hugging Face transformers.

Builds tiny random-weight models of each supported family (Llama plain, Llama with llama3 RoPE
scaling + tied embeddings, Qwen2 with q/k/v biases, Qwen3 with q/k norms; GQA ratios 1, 2, 4, 6, 8;
odd hidden sizes; head dims 32, 64, 128; bf16, f16 and f32 weights; both config.json spellings of
RoPE) and saves each as a model folder under tests/golden/<name>/:

  config.json, model.safetensors, generation_config.json   (as save_pretrained writes them)
  expected.json   for fixed prompts (token ids): the fp32 logits at every prompt position and the
                  greedy continuation (argmax, no EOS stop) with the top-1/top-2 margin of each step,
                  and named activations at the last prompt position (embd, h.<layer>, final_norm)

The reference runs in fp32 on the *stored* weights (bf16/f16 weights upcast to fp32), so the C++
forward pass computes the same function and must match to ~1e-6 relative error.

Weights are drawn so that the computation is not degenerate: matrices ~ N(0, 1/in_features)
(attention scores and logits of order 1), embeddings ~ N(0, 1) (tied: N(0, 1/hidden)), norm weights ~ 1 + N(0, 0.1^2),
biases ~ N(0, 0.1^2). Greedy steps whose top-1/top-2 margin is below MIN_MARGIN are rejected (the
prompt is redrawn), so that tiny numeric differences cannot flip a token.

Run (CPU is enough, takes ~10 s):   python3 tools/make_golden.py [--out tests/golden]
"""
import argparse
import json
import shutil
from pathlib import Path

import torch
import transformers
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

MIN_MARGIN = 1e-3   # smallest accepted top-1 minus top-2 logit of a greedy step
N_GREEDY = 12       # tokens generated per prompt
PROMPT_LENGTHS = [1, 6, 19]
LOGIT_SUBSET = 256  # models with a vocabulary above 4096 store logits of this many fixed ids only

FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

# name: family, storage dtype, config fields, spelling of RoPE in config.json ("legacy": rope_theta +
# rope_scaling as published checkpoints; "v5": rope_parameters as transformers 5 writes).
MODELS = {
    "llama_f32": dict(
        family="llama", dtype="f32", spelling="legacy",
        config=dict(vocab_size=384, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=64, rope_theta=10000.0,
                    rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2)),
    "llama3_tied_bf16": dict(  # llama3 RoPE scaling with a short original context: all three bands used
        family="llama", dtype="bf16", spelling="legacy",
        config=dict(vocab_size=512, hidden_size=96, intermediate_size=200, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-5,
                    max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 3],
                    rope_theta=500000.0,
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_max_position_embeddings=32))),
    "llama_gqa2_f16": dict(
        family="llama", dtype="f16", spelling="v5",
        config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=64, rope_theta=10000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=128, tie_word_embeddings=False,
                    bos_token_id=0, eos_token_id=255)),
    "qwen2_bias_bf16": dict(
        family="qwen2", dtype="bf16", spelling="v5",
        config=dict(vocab_size=300, hidden_size=72, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=6, num_key_value_heads=1, head_dim=64, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False,
                    bos_token_id=0, eos_token_id=299)),
    "qwen3_qknorm_bf16": dict(
        family="qwen3", dtype="bf16", spelling="v5",
        config=dict(vocab_size=256, hidden_size=200, intermediate_size=136, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=1, head_dim=32, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False,
                    bos_token_id=0, eos_token_id=[254, 255])),
    "qwen3_tied_f32": dict(
        family="qwen3", dtype="f32", spelling="legacy",
        config=dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=128, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=True,
                    bos_token_id=0, eos_token_id=255)),
    # The Llama 3 vocabulary and special ids with a tiny body: runs with the real Llama 3 tokenizer
    # (not committed: copy tokenizer*.json of ../shared/data/tokenizers/llama3 next to it, or point
    # the CLI's tokenizer option there). Llama 3.2 RoPE values.
    "llama3_vocab_bf16": dict(
        family="llama", dtype="bf16", spelling="legacy", tokenizer="llama3",
        config=dict(vocab_size=128256, hidden_size=16, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-5,
                    max_position_embeddings=131072, tie_word_embeddings=True, bos_token_id=128000,
                    eos_token_id=[128001, 128008, 128009], rope_theta=500000.0,
                    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=8192))),
}

TEXT_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    return", "Hello"]


def init_weights(model, gen):
    """Redraws every parameter (see the module docstring for the distributions)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            elif "embed_tokens" in name:
                # Tied: the embedding is also the LM head; at N(0, 1) the residual stream would be
                # dominated by the input token's own row and greedy would repeat it forever.
                p.copy_(r / p.shape[1] ** 0.5 if model.config.tie_word_embeddings else r)
            else:  # nn.Linear weight [out, in]
                p.copy_(r / p.shape[1] ** 0.5)


def greedy(model, ids, n):
    """Greedy continuation (argmax each step, no EOS stop) and the top-1/top-2 margin of each step."""
    ids = list(ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(out[-1])
    return out, margins


def activations_at_last(model, prompt):
    """Named activations at the last prompt position, as the C++ hook names them: "embd", "h.<layer>"
    (output of each decoder layer) and "final_norm". Lets a failing test name the first divergence."""
    captured = {}

    def keep(name):
        def hook(_module, _inputs, output):
            t = output[0] if isinstance(output, tuple) else output
            captured[name] = round9(t[0, -1].tolist())
        return hook

    handles = [model.model.embed_tokens.register_forward_hook(keep("embd")),
               model.model.norm.register_forward_hook(keep("final_norm"))]
    handles += [layer.register_forward_hook(keep(f"h.{i}")) for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(torch.tensor([prompt]))
    for h in handles:
        h.remove()
    return captured


def round9(xs):
    return [float(f"{x:.9g}") for x in xs]


def respell_rope(config_path, spelling, rope_fields):
    """Rewrites config.json's RoPE fields in the requested spelling, whatever transformers wrote."""
    cfg = json.loads(config_path.read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        cfg.pop(key, None)
    theta = rope_fields["rope_theta"]
    scaling = rope_fields.get("rope_scaling")
    if spelling == "legacy":
        cfg["rope_theta"] = theta
        cfg["rope_scaling"] = scaling
    else:
        cfg["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def check_reload(folder, ref):
    """transformers itself must read the written folder (whichever RoPE spelling config.json now uses)
    as the model the expectations come from."""
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    ids = torch.arange(0, 40).remainder(ref.config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        if not torch.equal(loaded(ids).logits, ref(ids).logits):
            raise SystemExit(f"{folder}: transformers reloads the folder as a different model")


def make_prompts(spec, cfg, gen):
    if spec.get("tokenizer"):
        from tokenizers import Tokenizer
        tok_dir = Path(__file__).resolve().parents[2] / "shared/data/tokenizers" / spec["tokenizer"]
        tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        return [(t, [cfg["bos_token_id"]] + tok.encode(t, add_special_tokens=False).ids) for t in TEXT_PROMPTS]
    return [(None, torch.randint(0, cfg["vocab_size"], (n,), generator=gen).tolist()) for n in PROMPT_LENGTHS]


def build(name, spec, out_dir, seed):
    config_cls, model_cls = FAMILIES[spec["family"]]
    fields = dict(spec["config"])
    rope_fields = {"rope_theta": fields.pop("rope_theta"), "rope_scaling": fields.pop("rope_scaling", None)}
    rope_parameters = dict(rope_fields["rope_scaling"] or {"rope_type": "default"}, rope_theta=rope_fields["rope_theta"])
    config = config_cls(**fields, rope_parameters=rope_parameters, attn_implementation="eager")
    gen = torch.Generator().manual_seed(seed)
    model = model_cls(config).eval()
    init_weights(model, gen)
    if config.tie_word_embeddings:
        model.tie_weights()
    # Round to the storage dtype once; the reference computes in fp32 on exactly those values.
    stored = model.to(DTYPES[spec["dtype"]])
    folder = out_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    stored.save_pretrained(folder)
    eos = fields["eos_token_id"]
    GenerationConfig(bos_token_id=fields["bos_token_id"], eos_token_id=eos, do_sample=False).save_pretrained(folder)
    respell_rope(folder / "config.json", spec["spelling"], rope_fields)
    # A fresh fp32 model holding the stored values: converting `stored` back with .to(float32) would
    # keep its RoPE inv_freq buffer rounded to the storage dtype, which is not what a loader computes.
    ref = model_cls(config).eval()
    ref.load_state_dict({k: v.to(torch.float32) for k, v in stored.state_dict().items()})
    if config.tie_word_embeddings:
        ref.tie_weights()

    check_reload(folder, ref)

    n_vocab = fields["vocab_size"]
    subset = None
    if n_vocab > 4096:
        subset = sorted(set(torch.randperm(n_vocab, generator=gen)[:LOGIT_SUBSET].tolist()))
    cases = []
    for text, prompt in make_prompts(spec, fields, gen):
        for attempt in range(50):
            tokens, margins = greedy(ref, prompt, N_GREEDY)
            if min(margins) >= MIN_MARGIN or text is not None:
                break
            prompt = torch.randint(0, n_vocab, (len(prompt),), generator=gen).tolist()
        else:
            raise SystemExit(f"{name}: no prompt of length {len(prompt)} with greedy margins >= {MIN_MARGIN}")
        with torch.no_grad():
            logits = ref(torch.tensor([prompt])).logits[0]  # [n_prompt, n_vocab]
        if subset is not None:
            logits = logits[:, subset]
        case = dict(prompt=prompt, logits=[round9(row.tolist()) for row in logits], greedy=tokens,
                    greedy_margins=round9(margins), activations_last=activations_at_last(ref, prompt))
        if text is not None:
            case["text"] = text
        cases.append(case)
    expected = dict(model=name, family=spec["family"], dtype=spec["dtype"], rope_spelling=spec["spelling"],
                    transformers=transformers.__version__, torch=torch.__version__, seed=seed,
                    logits_vocab_ids=subset, eos_token_ids=eos if isinstance(eos, list) else [eos], cases=cases)
    if spec.get("tokenizer"):
        expected["tokenizer"] = f"../shared/data/tokenizers/{spec['tokenizer']}"
    (folder / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(f"{name:20s} {size / 1e6:6.2f} MB  min greedy margin "
          f"{min(min(c['greedy_margins']) for c in cases):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/golden"))
    ap.add_argument("--only", nargs="*", help="model names to build (default: all)")
    args = ap.parse_args()
    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, (name, spec) in enumerate(MODELS.items()):
        if not args.only or name in args.only:
            build(name, spec, out, seed=1000 + i)


if __name__ == "__main__":
    main()
