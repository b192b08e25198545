"""SDPA peers for the decode rows of bench/attention.cpp, measured in the same GPU call on the same shapes.

Reads the RESULT lines of our benchmark's log (argv[1]); for each cold default decode row (batch B, context L,
head dim D; 32 query / 8 kv heads, one query token per sequence) times torch's scaled_dot_product_attention
with the CUDNN and FLASH backends the way ours is timed: CUDA-graph replays of back-to-back calls rotating
over > 512 MB of K/V (K/V repeated to 32 heads where a backend refuses GQA), TB/s of the K+V bytes. Prints one
table of every row of ours (all variants) with the peers and ours/best, against the read ceiling of our run.
Usage: python3 bench/attention_decode_peers.py OUR_LOG [--backends CUDNN,FLASH] [--max-gb 9]
"""
import json
import math
import sys

import torch

from attention_peers import ALL, HKV, HQ, accepted, call, median_ms


def decode_peer(backend, d, length, batch):
    """(us per call, TB/s) or None when the backend refuses the shape."""
    kv_bytes = 2 * HKV * length * d * 2 * batch
    nbuf = max(1, min(64, math.ceil(512e6 / kv_bytes)))
    q = torch.randn(batch, HQ, 1, d, device="cuda", dtype=torch.bfloat16)
    ks = [torch.randn(batch, HKV, length, d, device="cuda", dtype=torch.bfloat16) for _ in range(nbuf)]
    vs = [torch.randn(batch, HKV, length, d, device="cuda", dtype=torch.bfloat16) for _ in range(nbuf)]
    acc = accepted(backend, q, ks[0], vs[0], False)
    if acc is None:
        return None
    gqa = acc[2]
    if not gqa:
        ks = [k.repeat_interleave(HQ // HKV, dim=1) for k in ks]
        vs = [v.repeat_interleave(HQ // HKV, dim=1) for v in vs]
    est_us = kv_bytes / 4e6 + 5.0
    calls = max(1, min(64, int(3000 / est_us)))
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for i in range(3):
            call(backend, q, ks[i % nbuf], vs[i % nbuf], False, gqa)
    torch.cuda.current_stream().wait_stream(st)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(backend, q, ks[i % nbuf], vs[i % nbuf], False, gqa)
    us = median_ms(graph.replay, 7 if est_us * calls > 1500 else 15) / calls * 1e3
    del graph, ks, vs
    return us, kv_bytes / (us * 1e-6) / 1e12


def main():
    ours = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
    backends = ["CUDNN", "FLASH"]
    if "--backends" in sys.argv:
        backends = sys.argv[sys.argv.index("--backends") + 1].split(",")
    max_gb = float(sys.argv[sys.argv.index("--max-gb") + 1]) if "--max-gb" in sys.argv else 9.0
    ceiling = next((r["tbps"] for r in ours if r["kind"] == "read_ceiling"), float("nan"))
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
    peers = {}
    for r in ours:
        if r["kind"] != "decode" or r["temp"] != "cold" or r["variant"] != "default":
            continue
        key = (r["head_dim"], r["kv_len"], r["batch"])
        kv_gb = 2 * HKV * r["kv_len"] * r["head_dim"] * 2 * r["batch"] / 1e9
        peers[key] = {}
        for name in backends:
            res = None
            if kv_gb <= max_gb:
                try:
                    res = decode_peer(ALL[name], *key)
                except Exception as e:  # a backend that fails on a shape is reported, not fatal
                    print(f"[peer] {name} D={key[0]} L={key[1]} B={key[2]} failed: {str(e)[:100]}")
            peers[key][name] = res
            if res:
                print("RESULT " + json.dumps(dict(kind="decode_peer", backend=name, head_dim=key[0], kv_len=key[1],
                                                  batch=key[2], us=res[0], tbps=res[1])), flush=True)
            torch.cuda.empty_cache()
    print(f"\nread ceiling {ceiling:.3f} TB/s (our process). us per call / TB/s of K+V; ours/best = peer_us/our_us")
    head = f"{'D':>3s} {'L':>6s} {'B':>2s} {'temp':4s} {'variant':8s} {'spl':>3s} {'ours us':>9s} {'TB/s':>5s} {'%rd':>5s}"
    print(head + "".join(f" {b + ' us':>10s} {'TB/s':>5s}" for b in backends) + "  speedup")
    for r in ours:
        if r["kind"] != "decode":
            continue
        key = (r["head_dim"], r["kv_len"], r["batch"])
        line = (f"{r['head_dim']:3d} {r['kv_len']:6d} {r['batch']:2d} {r['temp']:4s} {r['variant']:8s} {r['splits']:3d} "
                f"{r['us']:9.2f} {r['tbps']:5.2f} {r['pct_read']:5.1f}")
        best = None
        show = r["temp"] == "cold" and r["variant"] == "default"
        for b in backends:
            res = peers.get(key, {}).get(b) if show else None
            line += f" {res[0]:10.2f} {res[1]:5.2f}" if res else f" {'-':>10s} {'-':>5s}"
            if res:
                best = res[0] if best is None else min(best, res[0])
        line += f"  {best / r['us']:6.2f}x" if best else ""
        print(line)


if __name__ == "__main__":
    main()
