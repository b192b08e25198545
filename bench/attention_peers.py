"""SDPA peers for bench/attention.cpp, measured in the same GPU round on the same shapes.

Reads the RESULT lines of our benchmark's log (argv[1]), runs torch's scaled_dot_product_attention with the
CUDNN and FLASH backends on each prefill shape (bf16, 32 q / 8 kv heads; K/V repeated to 32 heads where a
backend refuses GQA), then prints the ratio table ours / best peer. The decode rows have their own peers script,
bench/attention_decode_peers.py, which shares the helpers below.
Usage: python3 bench/attention_peers.py OUR_LOG [--backends CUDNN,FLASH]
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HQ, HKV = 32, 8
ALL = {"CUDNN": SDPBackend.CUDNN_ATTENTION, "FLASH": SDPBackend.FLASH_ATTENTION,
       "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}


def call(backend, q, k, v, causal, gqa):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def accepted(backend, q, k, v, causal):
    """(k, v, gqa flag) that this backend runs, or None."""
    for gqa in (True, False):
        kk = k if gqa else k.repeat_interleave(HQ // HKV, dim=1)
        vv = v if gqa else v.repeat_interleave(HQ // HKV, dim=1)
        try:
            call(backend, q, kk, vv, causal, gqa)
            torch.cuda.synchronize()
            return kk, vv, gqa
        except Exception:
            continue
    return None


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def prefill_peer(backend, d, s, b, causal):
    g = torch.Generator(device="cuda").manual_seed(s + d + b)
    q = torch.randn(b, HQ, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, HKV, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, HKV, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    acc = accepted(backend, q, k, v, causal)
    if acc is None:
        return None
    kk, vv, gqa = acc
    flops = 4 * b * HQ * s * s * d / (2 if causal else 1)
    ms = median_ms(lambda: call(backend, q, kk, vv, causal, gqa), 10 if flops > 2e14 else 30)
    return flops / (ms * 1e-3) / 1e12


def main():
    ours = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
    backends = ["CUDNN", "FLASH"]
    if "--backends" in sys.argv:
        backends = sys.argv[sys.argv.index("--backends") + 1].split(",")
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
    rows = []
    for r in ours:
        if r["kind"] == "prefill" and r["tag"] == "table":
            best, peers = 0.0, {}
            for name in backends:
                try:
                    tf = prefill_peer(ALL[name], r["head_dim"], r["seq"], r["batch"], r["causal"])
                except Exception as e:  # a backend that fails on a shape is reported, not fatal
                    print(f"[peer] {name} failed: {str(e)[:120]}")
                    tf = None
                peers[name] = tf
                if tf:
                    best = max(best, tf)
            print("RESULT " + json.dumps(dict(kind="prefill_peer", **{k: r[k] for k in ("head_dim", "seq", "batch", "causal")},
                                               **peers)), flush=True)
            rows.append((f"prefill D={r['head_dim']:3d} S={r['seq']:5d} B={r['batch']} c={int(r['causal'])}",
                         r["tflops"], peers, best, "TFLOP/s"))
            torch.cuda.empty_cache()
    print(f"\n{'shape':34s} {'ours':>8s} " + " ".join(f"{b:>9s}" for b in backends) + "  ours/best")
    for name, mine, peers, best, unit in rows:
        cells = " ".join(f"{peers[b]:9.2f}" if peers.get(b) else f"{'-':>9s}" for b in backends)
        ratio = mine / best if best else float("nan")
        print(f"{name:34s} {mine:8.2f} {cells}  {ratio:6.3f} {unit}")


if __name__ == "__main__":
    main()
