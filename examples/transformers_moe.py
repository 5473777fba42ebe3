#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The seed's run with a transformers Qwen3-MoE on vramd: two stages on one
GPU whose KV and experts contend for the same memory.

The model has random weights (no hub) and the seed's shape: 48 layers,
stage 0 = layers 0-31, stage 1 = layers 32-47, every layer attention then
experts. Each stage is a vramd stage of its own (one KV lane per layer and
K or V, the native context's whole window reserved, only the initial part
mapped at start) that lends only its own unused window to its experts, as
the seed's one-GPU split (tests/scenarios/seed-pp32-16-1gpu.json). The
requests are the seed's -- 65,536, 131,072, 261,000 then 8,192 prompt
tokens, 1,024 generated -- divided by --scale (8 by default, with the
context: 32,768 tokens), and the table shows per request and stage what the
seed's report shows: KV mapped and expert loans while decoding, resident
experts, misses, and after the trim the KV back to the initial window with
the freed memory gone to resident experts.

  transformers_moe.py                 start vramd (cuda) and run, on the GPU
  transformers_moe.py --small         a small model and context: a quick smoke
  transformers_moe.py --check         also decode with plain memory first and
                                      compare the tokens (the same experts
                                      implementation: grouped_mm by default,
                                      --experts-implementation eager)
  transformers_moe.py --write-config F; vramd --config F ...; then
  transformers_moe.py --socket S      against a vramd you started

vramd is $VRAMD_BIN (else build/vramd), libvram $VRAM_LIB (else
build/libvram.so). Sizes are options (--help). Measured on an H200: the
defaults in about two minutes (model 6 s, install with 4.5 GiB of pinned
host experts 2 s, the four requests 24-32 s each, most of it decoding with
experts computed from host copies); --small in about 20 s, --check (plain
memory first) adding as much again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
os.environ["VRAM_LIB"] = os.environ.get("VRAM_LIB") or str(REPO / "build" / "libvram.so")

try:
    import torch  # noqa: E402
except ImportError as _e:  # one line, not a traceback: the GPU suite reads it
    print(f"transformers_moe: skipped: torch not installed ({_e})")
    sys.exit(0)

import vram  # noqa: E402

MIB = 1 << 20
CHUNK = 2 * MIB
SEED_CONTEXT, SEED_INITIAL, SEED_STEP = 262144, 16384, 8192
SEED_REQUESTS = [(65536, 1024), (131072, 1024), (261000, 1024), (8192, 1024)]
SPLIT = [(0, 0, 31), (1, 32, 47)]
PRESETS = {
    # bf16: 512 B a token per lane (4 KV heads of 64), experts of 1.5 MiB
    # (3 x 256 x 1024 x 2 B, the seed's slot); 64 experts, 8 a token.
    "default": dict(hidden=1024, heads=16, kv_heads=4, experts=64, topk=8,
                    moe_inter=256, vocab=8192, scale=8),
    # 1 KiB a token per lane (4 KV heads of 128), 16 experts of 1.5 MiB, 2
    # a token; context 8,192.
    "small": dict(hidden=512, heads=4, kv_heads=4, experts=16, topk=2,
                  moe_inter=512, vocab=2048, scale=32),
}


def dims(a: argparse.Namespace) -> Dict[str, int]:
    item = torch.empty((), dtype=getattr(torch, a.dtype)).element_size()
    head_dim = a.hidden // a.heads
    return {"item": item, "head_dim": head_dim, "lane": a.kv_heads * head_dim * item,
            "expert": 3 * a.moe_inter * a.hidden * item,
            "context": SEED_CONTEXT // a.scale, "initial": SEED_INITIAL // a.scale,
            "step": max(SEED_STEP // a.scale, 1)}


def vramd_config(a: argparse.Namespace) -> Dict[str, Any]:
    d = dims(a)
    stages, chunks = [], 0
    for s, first, last in SPLIT:
        n = last - first + 1
        stages.append({
            "id": s, "name": f"layers {first}-{last}", "device": 0,
            "first_layer": first, "last_layer": last,
            "kv_lanes": [{"name": f"{n} layers x (K, V)", "bytes_per_token": d["lane"],
                          "count": 2 * n}],
            "native_context": d["context"], "initial_tokens": d["initial"],
            "step_tokens": d["step"], "expert_slot": d["expert"],
            "loan": {"enabled": True, "headroom": 0, "recall_deadline_ms": 5000,
                     "hold_ms": 20000}})
        chunks += 2 * n * -(-d["context"] * d["lane"] // CHUNK)
    return {"doc": "examples/transformers_moe.py: the seed's split on one GPU, scaled; "
                   "capacity = the two stages' KV windows, each lending only its own",
            "backend": "cuda",
            "devices": [{"id": 0, "capacity": f"{chunks * 2}MiB", "chunk": "2MiB"}],
            "stages": stages}


def start_vramd(config: Dict[str, Any], backend: str) -> tuple:
    bin_ = os.environ.get("VRAMD_BIN") or str(REPO / "build" / "vramd")
    if not os.access(bin_, os.X_OK):
        raise SystemExit(f"no vramd at {bin_}: build it or set VRAMD_BIN")
    d = tempfile.mkdtemp(prefix="vramd-tfmoe-")
    os.chmod(d, 0o700)
    sock, cfg, log = (os.path.join(d, n) for n in ("vramd.sock", "vramd.json", "vramd.log"))
    with open(cfg, "w") as f:
        json.dump(config, f)
    with open(log, "wb") as lf:
        proc = subprocess.Popen([bin_, "--config", cfg, "--socket", sock, "--backend",
                                 backend, "--log-level", "info"], stdin=subprocess.DEVNULL,
                                stdout=lf, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(log, errors="replace") as f:
                raise SystemExit("vramd did not start:\n" + f.read())
        if os.path.exists(sock):
            try:
                vram.Client(sock, name="transformers_moe harness", ctl=True).close()
                return proc, d, sock
            except vram.VramError:
                pass
        time.sleep(0.05)


def build_model(a: argparse.Namespace, device: str) -> Any:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    d = dims(a)
    cfg = Qwen3MoeConfig(vocab_size=a.vocab, hidden_size=a.hidden,
                         intermediate_size=2 * a.hidden, num_hidden_layers=48,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         moe_intermediate_size=a.moe_inter, num_experts=a.experts,
                         num_experts_per_tok=a.topk, norm_topk_prob=True,
                         max_position_embeddings=max(d["context"], 4096),
                         decoder_sparse_step=1, mlp_only_layers=[],
                         tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    dtype = getattr(torch, a.dtype)
    # Made on the device in its dtype: 48 layers of experts initialised on
    # the CPU in float32 would take most of the run.
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3MoeForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to(dtype).eval()
    # What the replacement computes follows (install's experts_path
    # "auto"): grouped_mm -> the grouped path over the slot table, eager ->
    # the per-expert loop.
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(a.experts_implementation)
    else:
        model.config._experts_implementation = a.experts_implementation
    return model


def requests(a: argparse.Namespace) -> List[tuple]:
    new = a.new_tokens or max(1024 // a.scale, 8)
    return [(max(p // a.scale, 1), new) for p, _ in SEED_REQUESTS]


def ids_of(i: int, n: int, vocab: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(500 + i)
    return torch.randint(1, vocab, (1, n), generator=g).to(device)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="the small preset (a quick smoke)")
    for k in ("hidden", "heads", "kv_heads", "experts", "topk", "moe_inter", "vocab", "scale"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"default {PRESETS['default'][k]} (--small: {PRESETS['small'][k]})")
    ap.add_argument("--new-tokens", type=int, default=None,
                    help="tokens generated a request (default 1024 / scale)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--socket", help="a running vramd (started with --write-config's file)")
    ap.add_argument("--write-config", metavar="FILE", help="write vramd's configuration, exit")
    ap.add_argument("--experts-implementation", default="grouped_mm",
                    choices=["grouped_mm", "eager"],
                    help="the model's experts implementation, which VramExperts follow "
                         "(default grouped_mm, transformers' own default on a GPU)")
    ap.add_argument("--check", action="store_true",
                    help="decode each request with plain memory first; compare tokens")
    ap.add_argument("--sdpa", default="flash,math",
                    help="SDPA backends allowed, both runs (default flash,math: repeatable; "
                         "'any' lets torch choose, and on an H200 it chooses cuDNN's, whose "
                         "decode differs from run to run: measured, the same model and "
                         "prompt gave other tokens twice in a row)")
    a = ap.parse_args()
    preset = PRESETS["small" if a.small else "default"]
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.hidden % a.heads or a.heads % a.kv_heads:
        ap.error("hidden must be a multiple of heads, heads of kv-heads")
    config = vramd_config(a)
    if a.write_config:
        with open(a.write_config, "w") as f:
            json.dump(config, f, indent=1)
        print(f"wrote {a.write_config}")
        return 0
    try:
        from vram.integrations import transformers as vt
    except ImportError as e:
        print(f"transformers_moe: skipped: {e}")
        return 0
    try:
        vt.sdpa_backends(a.sdpa)
    except ValueError as e:
        ap.error(str(e))
    d = dims(a)
    reqs = requests(a)
    proc = tmp = None
    sock = a.socket
    if sock is None:
        backend = "cuda" if torch.cuda.is_available() else "host"
        proc, tmp, sock = start_vramd(config, backend)
    rc = 0
    try:
        client = vram.Client(sock, name="transformers_moe")
        device = "cuda" if client.backend == "cuda" else "cpu"
        print(f"model: 48 layers, hidden {a.hidden}, {a.heads} heads ({a.kv_heads} KV) of "
              f"{d['head_dim']}, {a.experts} experts of {d['expert'] / MIB:g} MiB ({a.topk} a "
              f"token), {a.dtype}, on {device}; context {d['context']} tokens "
              f"(the seed's / {a.scale})", flush=True)
        t = time.monotonic()
        model = build_model(a, device)
        print(f"model built in {time.monotonic() - t:.1f} s; SDPA backends: {a.sdpa}",
              flush=True)
        attention = vt.sdpa_backends(a.sdpa)
        attention.__enter__()
        plain_tokens = []
        if a.check:
            for i, (n, new) in enumerate(reqs):
                ids = ids_of(i, n, a.vocab, device)
                cache = vt.plain_cache(model, [(f, l) for _, f, l in SPLIT], n + new)
                with torch.no_grad():
                    out = model.generate(ids, past_key_values=cache, max_new_tokens=new,
                                         do_sample=False, pad_token_id=0)
                plain_tokens.append(out[0, n:].tolist())
                del cache
            print(f"plain memory: {len(reqs)} requests decoded", flush=True)
        t = time.monotonic()
        cache = vt.install(model, client, stages=[s for s, _, _ in SPLIT])
        path = sorted({m.path for m in model.modules() if isinstance(m, vt.VramExperts)})
        print(f"installed in {time.monotonic() - t:.1f} s (host copies of the experts "
              f"{'pinned' if device == 'cuda' else 'in memory'}; {a.experts_implementation} "
              f"model, VramExperts path {', '.join(path)})", flush=True)
        show = lambda: "; ".join(
            f"stage {s}: KV {v['kv_mapped_bytes'] // MIB} MiB, loans "
            f"{v['expert_loaned_bytes'] // MIB} MiB, {v['resident']}/{v['experts']} resident"
            for s, v in cache.stats().items())
        print("start: " + show(), flush=True)
        rows = []
        for i, (n, new) in enumerate(reqs):
            ids = ids_of(i, n, a.vocab, device)
            for ex in cache.experts.values():
                ex.reset_counts()
            first: List[float] = []

            class FirstToken(_processor_base()):
                def __call__(self, input_ids, scores):
                    if not first:
                        if device == "cuda":
                            torch.cuda.synchronize()
                        first.append(time.monotonic())
                    return scores

            try:
                cache.begin_request(n, new)   # the output budget, before decode
            except vram.VramError as e:
                print(f"request {i + 1}: {n}+{new} tokens refused: {e}", flush=True)
                rc = 1
                continue
            t0 = time.monotonic()
            with torch.no_grad():
                out = model.generate(ids, past_key_values=cache, max_new_tokens=new,
                                     do_sample=False, pad_token_id=0,
                                     logits_processor=[FirstToken()])
            if device == "cuda":
                torch.cuda.synchronize()
            t1 = time.monotonic()
            during = cache.stats()
            cache.end_request()
            after = cache.stats()
            tokens = out[0, n:].tolist()
            same = ""
            if a.check:
                ok = tokens == plain_tokens[i]
                same = "tokens = plain" if ok else "TOKENS DIFFER from plain memory"
                rc |= 0 if ok else 1
            for s, _, _ in SPLIT:
                rows.append((i + 1, f"{n}+{new}", s, during[s], after[s],
                             first[0] - t0 if first else float("nan"),
                             (new - 1) / (t1 - first[0]) if first and new > 1 else float("nan")))
            print(f"request {i + 1}: {n}+{new} tokens in {t1 - t0:.1f} s {same}", flush=True)
        print("\nrequest  tokens         stage | while decoding: KV MiB  loans MiB  resident  "
              "hits    misses | after trim: KV MiB  loans MiB  resident | prefill s  decode tok/s")
        for r, toks, s, du, af, pre, dec in rows:
            print(f"{r:7d}  {toks:13s}  {s:5d} | {du['kv_mapped_bytes'] // MIB:22d} "
                  f"{du['expert_loaned_bytes'] // MIB:10d} {du['resident']:9d} {du['hits']:7d} "
                  f"{du['misses']:7d} | {af['kv_mapped_bytes'] // MIB:19d} "
                  f"{af['expert_loaned_bytes'] // MIB:10d} {af['resident']:9d} | {pre:9.2f} "
                  f"{dec:13.1f}")
        client.close()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


def _processor_base() -> type:
    try:
        from transformers import LogitsProcessor
    except ImportError:  # pragma: no cover
        from transformers.generation.logits_process import LogitsProcessor
    return LogitsProcessor


if __name__ == "__main__":
    sys.exit(main())
