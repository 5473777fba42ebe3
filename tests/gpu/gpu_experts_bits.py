#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Which experts path gives other bits than the model's own experts, in the
seed-shaped run (examples/transformers_moe.py's model and vramd
configuration): every VramExperts call is also computed by the layer's
original experts module (kept, with its GPU weights) on the same inputs
and compared bit for bit; a mismatch is reported with the path it took
(direct: every expert resident; windows: every routed expert resident;
full: some missed; allmiss) and whether the slots' bytes equal the
original weights. Also decodes request 1 with plain memory twice (is the
reference itself repeatable?). On the GPU machine; a diagnostic, not a
check of the suite."""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))

import torch  # noqa: E402

import transformers_moe as ex  # noqa: E402
import vram  # noqa: E402
from vram.integrations import transformers as vt  # noqa: E402


def fingerprints(model, run):
    """Hooks on every decoder layer's attention, router, experts and
    output: a fingerprint of each output (a weighted sum of its bits, on
    the device, no sync) appended to run[(layer, part)]."""
    hooks = []
    for name, mod in model.named_modules():
        part = name.rsplit(".", 1)[-1]
        if part not in ("self_attn", "gate", "experts") and not name.endswith(
                tuple(f"layers.{i}" for i in range(48))):
            continue
        if part not in ("self_attn", "gate", "experts"):
            part = "layer"
        if ".layers." not in name + "." and not name.startswith("model.layers"):
            continue
        layer = int(name.split("layers.")[1].split(".")[0])

        def hook(m, args, out, key=(layer, part)):
            t = out[0] if isinstance(out, tuple) else out
            bits = t.detach().contiguous().view(-1).view(torch.int16).to(torch.int64)
            w = torch.arange(1, bits.numel() + 1, device=bits.device) % 65521
            run.setdefault(key, []).append((bits * w).sum())
        hooks.append(mod.register_forward_hook(hook))
    return hooks


def repeat(a) -> int:
    """Plain request 1 twice with each of SDPA's backends (torch's choice
    first): whether the tokens repeat, and the first call whose output
    differs between the runs, by (step, layer, part) in call order."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    model = ex.build_model(a, "cuda")
    n, new = ex.requests(a)[0]
    ranges = [(f, l) for _, f, l in ex.SPLIT]
    parts = ["self_attn", "gate", "experts", "layer"]
    for name in ["default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"]:
        runs, toks = [], []
        t = time.monotonic()
        try:
            for _ in range(2):
                cache = vt.plain_cache(model, ranges, n + new)
                run = {}
                hooks = fingerprints(model, run)
                ctx = sdpa_kernel([getattr(SDPBackend, name)]) if name != "default" else None
                with torch.no_grad():
                    if ctx is not None:
                        ctx.__enter__()
                    try:
                        out = model.generate(ex.ids_of(0, n, a.vocab, "cuda"),
                                             past_key_values=cache, max_new_tokens=new,
                                             do_sample=False, pad_token_id=0)
                    finally:
                        if ctx is not None:
                            ctx.__exit__(None, None, None)
                for h in hooks:
                    h.remove()
                runs.append({k: torch.stack(v).tolist() for k, v in run.items()})
                toks.append(out[0, n:].tolist())
                del cache
        except Exception as e:  # a backend that cannot run these shapes
            print(f"{name}: cannot run: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        order = sorted(runs[0], key=lambda k: (k[0], parts.index(k[1])))
        first = None
        for step in range(max(len(v) for v in runs[0].values())):
            for k in order:
                x, y = runs[0][k], runs[1].get(k, [])
                if step < len(x) and step < len(y) and x[step] != y[step]:
                    first = (step, k)
                    break
            if first:
                break
        print(f"{name}: request 1 twice in {time.monotonic() - t:.1f} s: tokens "
              f"{'same' if toks[0] == toks[1] else 'DIFFER'}; first output that differs "
              f"(forward call, (layer, part)): {first}", flush=True)
    return 0


def main() -> int:
    a = argparse.Namespace(**ex.PRESETS["default"], new_tokens=None, dtype="bfloat16",
                           seed=0, experts_implementation="grouped_mm")
    if sys.argv[1:2] == ["--repeat"]:
        return repeat(a)
    nreq = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    proc, tmp, sock = ex.start_vramd(ex.vramd_config(a), "cuda")
    try:
        client = vram.Client(sock, name="experts bits")
        model = ex.build_model(a, "cuda")
        reqs = ex.requests(a)[:nreq]
        ranges = [(f, l) for _, f, l in ex.SPLIT]

        def plain(i):
            n, new = reqs[i]
            cache = vt.plain_cache(model, ranges, n + new)
            with torch.no_grad():
                out = model.generate(ex.ids_of(i, n, a.vocab, "cuda"), past_key_values=cache,
                                     max_new_tokens=new, do_sample=False, pad_token_id=0)
            return out[0, n:].tolist()

        plain_tokens = [plain(i) for i in range(len(reqs))]
        again = plain(0)
        print(f"plain request 1 decoded twice: {'same' if again == plain_tokens[0] else 'DIFFERENT'}",
              flush=True)
        ref = {l: m for l, (_, _, m) in vt.find_experts(model).items()}
        cache = vt.install(model, client, stages=[s for s, _, _ in ex.SPLIT])
        counts = collections.Counter()
        mism = []
        req = [0]

        def forward(self, h, idx, w):
            st = self.stage
            st.poll()
            direct = st._plan(self.layer)[0]
            used = set(idx.reshape(-1).tolist())
            res = [st.slot_of.get((self.layer, x)) is not None for x in used]
            kind = ("direct" if direct else "windows" if all(res)
                    else "full" if any(res) else "allmiss")
            out = st.run_grouped(self.layer, h, idx, w, self.act_fn)
            r = ref[self.layer](h, idx, w)
            eq = torch.equal(out, r)
            counts[(kind, "tokens>1" if h.shape[0] > 1 else "1 token", eq)] += 1
            if not eq and len(mism) < 30:
                bad = 0
                for x in range(st.num_experts):
                    s = st.slot_of.get((self.layer, x))
                    if s is None:
                        continue
                    g, d = st.views.get(s) or st._slot_views(s)
                    m = ref[self.layer]
                    if not (torch.equal(g, m.gate_up_proj[x]) and torch.equal(d, m.down_proj[x])):
                        bad += 1
                mism.append((req[0], self.layer, kind, h.shape[0],
                             (out.float() - r.float()).abs().max().item(), bad))
            return out

        vt.VramExperts.forward = forward
        for i, (n, new) in enumerate(reqs):
            req[0] = i + 1
            cache.begin_request(n, new)
            t = time.monotonic()
            with torch.no_grad():
                out = model.generate(ex.ids_of(i, n, a.vocab, "cuda"), past_key_values=cache,
                                     max_new_tokens=new, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            cache.end_request()
            toks = out[0, n:].tolist()
            first = next((j for j, (p, q) in enumerate(zip(toks, plain_tokens[i])) if p != q), None)
            print(f"request {i + 1}: {n}+{new} in {time.monotonic() - t:.1f} s: "
                  f"{'tokens = plain' if first is None else f'first differing token {first}'}",
                  flush=True)
        print("calls by (path, tokens, bit-equal to the model's module):")
        for k, v in sorted(counts.items()):
            print(f"  {k}: {v}")
        print("first mismatches (request, layer, path, tokens, max |diff|, slots whose "
              "bytes differ from the weights):")
        for m in mism:
            print("  ", m)
        client.close()
    finally:
        proc.terminate()
        proc.wait(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
