#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPU check of vram.integrations.transformers: a small Qwen3-MoE with
random weights (no hub) decodes the same tokens with its K and V in vramd
stages' KV regions and its experts on vramd's expert loans as with plain
memory, while the budgets move under it.

It starts vramd itself (cuda backend, a configuration of its own on a
temporary socket): $VRAMD_BIN, else build/vramd; libvram is $VRAM_LIB, else
build/libvram.so. With $VRAM_SOCKET it uses that vramd instead, which must
run this script's configuration (--print-config writes it).

The model: 6 layers (hidden 1024, 8 heads of 128 with 8 KV heads, 32
experts of 3 x 256 x 1024 of which 4 a token, bf16 by default), split into
stage 0 = layers 0-3 (a KV lane per layer and K or V) and stage 1 = layers
4-5 (one interleaved lane); stage 2 is another engine on the GPU whose
window is lent while it is not registered. Per request, the reference runs
first, twice: the stock model (DynamicCache) and the same layout as
vramd's over ordinary memory (plain_cache), once per experts path checked:
experts_implementation "eager" for VramExperts' loop, "grouped_mm"
(transformers' default) for its grouped path. Then install() puts the
model on vramd and the requests run again, on the loop, then (with
set_experts_path) on the grouped path (--experts chooses):

  1. a short prompt, inside the initial windows;
  2. a prompt past them with its output budget reserved first
     (cache.request: kv_reserve, the stage's own loans move into KV:
     EXPERT_SHRINK);
  3. a prompt that passes the window during decode (update reserves);
  4. a short prompt during which the other engine arrives (it registers
     stage 2 and reserves its whole window: RECALL of the pool loans,
     answered between layers) and after which it leaves.

Checks (a FAIL line each, exit status 1 if any): tokens equal the stock
model's and the plain layout's; logits equal the plain layout's bit for bit
and the stock model's within a tolerance (eager attention by default: with
--attn sdpa in bf16 the token and logit comparisons are printed as INFO:
SDPA's bf16 path did not reproduce between the caches, vramd or not); every step's K and V data_ptr are
the same, and the region's own addresses; the KV mapped grows and is
trimmed back; EXPERT_SHRINK and RECALL happened and the trims lent back;
misses and resident experts are printed per request, and on the grouped
path how many layers ran with every expert resident (no host sync) and how
many routed through the host (misses: the recall's request). About a
minute on an H200 (one path: 27 s end to end with eager attention, 38 s
with sdpa, measured; both paths about twice that, estimated).

    VRAM_LIB=build/libvram.so VRAMD_BIN=build/vramd python3 tests/python/gpu_transformers_cache.py
        [--dtype bfloat16|float32] [--attn eager|sdpa] [--experts both|grouped|loop]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import gpu_transformers_common as common  # noqa: E402  (sets sys.path and $VRAM_LIB)

import torch  # noqa: E402

import vram  # noqa: E402

MIB = 1 << 20
LAYERS, HIDDEN, HEADS, KV_HEADS = 6, 1024, 8, 8
HEAD_DIM = HIDDEN // HEADS
EXPERTS, TOPK, MOE_INTER, VOCAB = 32, 4, 256, 2048
SPLIT = [(0, 0, 3), (1, 4, 5)]                 # (stage, first, last layer)
CONTEXT, INITIAL, STEP = 8192, 1024, 1024
REQUESTS = [  # (name, prompt tokens, new tokens, reserve first, tenant at step)
    ("short", 600, 32, True, None),
    ("long, budget reserved", 3000, 32, True, None),
    ("grows while decoding", 2040, 32, False, None),
    ("recall mid-run", 800, 48, True, 10),
]


def config_json(itemsize: int) -> Dict[str, Any]:
    """vramd's configuration for the model in a dtype of itemsize bytes."""
    lane = KV_HEADS * HEAD_DIM * itemsize       # a token of one layer's K
    slot = 3 * MOE_INTER * HIDDEN * itemsize    # one expert
    n0, n1 = 4, 2
    chunk = 2 * MIB
    loan = {"enabled": True, "headroom": 0, "recall_deadline_ms": 5000, "hold_ms": 20000}
    stages = [
        {"id": 0, "name": "layers 0-3", "device": 0, "first_layer": 0, "last_layer": 3,
         "kv_lanes": [{"name": "4 layers x (K, V)", "bytes_per_token": lane, "count": 2 * n0}],
         "native_context": CONTEXT, "initial_tokens": INITIAL, "step_tokens": STEP,
         "expert_slot": slot, "loan": loan},
        {"id": 1, "name": "layers 4-5 (interleaved)", "device": 0, "first_layer": 4,
         "last_layer": 5,
         "kv_lanes": [{"name": "2 layers x (K, V), per token", "bytes_per_token": 2 * n1 * lane,
                       "count": 1}],
         "native_context": CONTEXT, "initial_tokens": INITIAL, "step_tokens": STEP,
         "expert_slot": slot, "loan": loan},
        {"id": 2, "name": "another engine", "device": 0, "first_layer": 0, "last_layer": 0,
         "kv_lanes": [{"bytes_per_token": lane, "count": 1}],
         "native_context": 2 * CONTEXT, "initial_tokens": INITIAL, "step_tokens": STEP,
         "expert_slot": slot, "loan": loan},
    ]
    windows = [-(-CONTEXT * 2 * n0 * lane // chunk), -(-CONTEXT * 2 * n1 * lane // chunk),
               -(-2 * CONTEXT * lane // chunk)]
    return {"doc": "tests/python/gpu_transformers_cache.py's vramd: capacity = the three "
                   "stages' windows; stage 2's is lent while nobody registered it",
            "backend": "cuda",
            "devices": [{"id": 0, "capacity": f"{sum(windows) * 2}MiB", "chunk": "2MiB",
                         "lend_unreserved": True}],
            "stages": stages}


def build_model(dtype: torch.dtype, attn: str = "eager") -> Any:
    return common.build_qwen3_moe(layers=LAYERS, hidden=HIDDEN, heads=HEADS,
                                  kv_heads=KV_HEADS, experts=EXPERTS, topk=TOPK,
                                  moe_inter=MOE_INTER, vocab=VOCAB,
                                  max_positions=4 * CONTEXT, dtype=dtype, attn=attn)


def hook_class() -> type:
    class StepHook(common.processor_base()):
        """Called once per generated token, between forwards."""

        def __init__(self, fn) -> None:
            self.fn, self.step = fn, 0

        def __call__(self, input_ids, scores):
            self.fn(self.step)
            self.step += 1
            return scores

    return StepHook


def generate(model: Any, ids: torch.Tensor, new: int, cache: Any = None,
             hook: Any = None) -> Tuple[List[int], torch.Tensor, float]:
    kw = dict(max_new_tokens=new, do_sample=False,
              return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    if cache is not None:
        kw["past_key_values"] = cache
    if hook is not None:
        kw["logits_processor"] = [hook]
    torch.cuda.synchronize()
    t = time.monotonic()
    with torch.no_grad():
        out = model.generate(ids, **kw)
    torch.cuda.synchronize()
    dt = time.monotonic() - t
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    logits = torch.stack([l[0].float() for l in out.logits]).cpu()
    return tokens, logits, dt


def prompt(i: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + i)
    return torch.randint(1, VOCAB, (1, n), generator=g).cuda()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"],
                    help="attention implementation (default eager; with sdpa in bf16 the "
                         "tokens and logits are compared for information only: see main())")
    ap.add_argument("--print-config", action="store_true",
                    help="write vramd's configuration to stdout and exit")
    ap.add_argument("--experts", default="both", choices=["both", "grouped", "loop"],
                    help="VramExperts' paths to check (default both: the loop against "
                         "the eager experts, then the grouped path against grouped_mm)")
    ap.add_argument("--atol", type=float, default=None,
                    help="tolerance of the logits against the stock model "
                         "(default 2e-2 for bf16, 1e-4 for fp32)")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    config = config_json(itemsize)
    if a.print_config:
        json.dump(config, sys.stdout, indent=1)
        return 0
    atol = a.atol if a.atol is not None else (2e-2 if dtype == torch.bfloat16 else 1e-4)
    if not torch.cuda.is_available():
        print("FAIL: no CUDA device for torch")
        return 1
    import transformers
    from vram.integrations import transformers as vt
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}, {a.dtype}, {a.attn} attention", flush=True)
    check = common.Checks()
    t0 = time.monotonic()
    model = build_model(dtype, a.attn)
    # With sdpa in bf16 the three runs -- the stock model, the plain layout,
    # vramd -- did not always agree on the H200: in one run vramd matched
    # the plain layout and the stock model differed, in another vramd
    # matched the stock model and the plain layout differed (the same
    # prompts, the same differences), so SDPA's bf16 path is not
    # reproducible between the caches whatever memory holds them. There
    # every token and logit comparison is reported (INFO) and only the
    # rest is checked; eager attention, or float32, is compared strictly
    # (bit for bit with the plain layout).
    strict = not (a.attn == "sdpa" and dtype == torch.bfloat16)
    compare = check if strict else common.info
    # VramExperts' paths and the stock experts implementation each is
    # compared with.
    from vram.integrations.experts import grouped_mm_usable
    paths = ["loop", "grouped"] if a.experts == "both" else [a.experts]
    if "grouped" in paths and not grouped_mm_usable("cuda"):
        check(False, "torch's grouped multiply does not run on this GPU: no grouped path")
        paths.remove("grouped")
    impl_of = {"loop": "eager", "grouped": "grouped_mm"}
    # References, before install changes the model.
    refs: Dict[str, List[Any]] = {}
    for path in paths:
        common.set_experts_implementation(model, impl_of[path])
        refs[path] = []
        for i, (name, n, new, _, _) in enumerate(REQUESTS):
            ids = prompt(i, n)
            stock = generate(model, ids, new)
            # The plain layout per stage as vramd's: stage 1's lane interleaved.
            plain = vt.plain_cache(model, [(f, l) for _, f, l in SPLIT], CONTEXT,
                                   layouts=["lanes", "interleaved"])
            same = generate(model, ids, new, cache=plain)
            refs[path].append((ids, stock, same))
            compare(stock[0] == same[0], f"reference {i + 1} ({name}, {impl_of[path]} "
                                         "experts): the plain layout decodes the stock "
                                         "model's tokens")
            print(f"  max |logit diff| plain layout vs stock: "
                  f"{(stock[1] - same[1]).abs().max().item():.3g}", flush=True)
    daemon = None
    sock = os.environ.get("VRAM_SOCKET")
    if not sock:
        daemon = common.Daemon(config)
        sock = daemon.sock
    client = vram.Client(sock, name="gpu_transformers_cache")
    try:
        cache = vt.install(model, client, stages=[s for s, _, _ in SPLIT],
                           experts_path=paths[0])
        ex0, ex1 = cache.experts[0], cache.experts[1]
        check(isinstance(model.model.layers[0].mlp.experts, vt.VramExperts),
              "install swapped the experts modules")
        print(f"  after install: stage 0 {ex0.backed} slots backed ({ex0.resident} of "
              f"{ex0.total_experts} experts resident), stage 1 {ex1.backed} "
              f"({ex1.resident} of {ex1.total_experts})", flush=True)
        lanes = {kv.stage: kv for kv in cache.parts}
        # Where layer 0's K and stage 1's first K must be: the regions' own
        # addresses (stage 1: its one lane, layer 0's K first of a token).
        want_ptr = {0: lanes[0].lane_address(0), 4: lanes[1].lane_address(0)}
        StepHook = hook_class()
        table = []
        tenant: Dict[str, Any] = {}
        initial = {s: kv.mapped_bytes() for s, kv in lanes.items()}
        for path in paths:
            vt.set_experts_path(model, path)
            print(f"== VramExperts on the {path} path, against the stock model with "
                  f"{impl_of[path]} experts", flush=True)
            for i, (name, n, new, reserve_first, tenant_at) in enumerate(REQUESTS):
                ids, stock, same = refs[path][i]
                ptrs: List[List[int]] = []
                mapped_seen: List[Tuple[int, int]] = []

                def step(k: int) -> None:
                    ptrs.append([cache.layers[j].keys.data_ptr() for j in range(LAYERS)]
                                + [cache.layers[j].values.data_ptr() for j in range(LAYERS)])
                    mapped_seen.append(tuple(lanes[s].mapped_tokens for s in (0, 1)))
                    if tenant_at is not None and k == tenant_at:
                        tenant.clear()
                        common.arrive(sock, tenant, 2, 2 * CONTEXT - 200)
                        deadline = time.monotonic() + 30
                        while not ex0.recalled_slots and time.monotonic() < deadline:
                            cache.poll()  # an engine waiting dispatches
                            time.sleep(0.002)
                        tenant["thread"].join(30)

                for ex in cache.experts.values():
                    ex.reset_counts()
                if reserve_first:
                    cache.begin_request(n, new)
                got = generate(model, ids, new, cache=cache, hook=StepHook(step))
                stats = cache.stats()
                cache.end_request()
                after = cache.stats()
                label = f"{path}: request {i + 1} ({name}, {n}+{new})"
                compare(got[0] == stock[0], f"{label}: tokens equal the stock model's")
                compare(got[0] == same[0], f"{label}: tokens equal the plain layout's")
                compare(torch.equal(got[1], same[1]),
                      f"{label}: logits equal the plain layout's bit for bit "
                      f"(max diff {(got[1] - same[1]).abs().max().item():.3g})")
                diff = (got[1] - stock[1]).abs().max().item()
                compare(diff <= atol, f"{label}: logits within {atol:g} of the stock "
                                          f"model's (max diff {diff:.3g})")
                check(len(set(map(tuple, ptrs))) == 1,
                      f"{label}: every step's K and V data_ptr the same ({len(ptrs)} steps)")
                check(ptrs[0][0] == want_ptr[0] and ptrs[0][4] == want_ptr[4],
                      f"{label}: K views at the regions' own addresses")
                if name.startswith("grows"):
                    check(mapped_seen[0][0] < mapped_seen[-1][0],
                          f"{label}: the window grew during decode "
                          f"({mapped_seen[0][0]} -> {mapped_seen[-1][0]} tokens)")
                if name.startswith("long"):
                    check(ex0.shrunk_slots > 0 and ex1.shrunk_slots > 0,
                          f"{label}: the reserve took expert slots into KV (EXPERT_SHRINK: "
                          f"{ex0.shrunk_slots}, {ex1.shrunk_slots} slots)")
                if tenant_at is not None:
                    check("error" not in tenant, f"{label}: the other engine reserved "
                                                  f"({tenant.get('error', 'ok')})")
                    check(ex0.recalled_slots > 0,
                          f"{label}: its arrival recalled {ex0.recalled_slots} of stage 0's slots")
                    check(ex0.misses > 0, f"{label}: experts computed from host copies "
                                          f"({ex0.misses} misses)")
                for s in (0, 1):
                    check(after[s]["kv_mapped_bytes"] == initial[s],
                          f"{label}: stage {s}'s KV trimmed back to its initial window "
                          f"({after[s]['kv_mapped_bytes'] // MIB} MiB)")
                    table.append((path, i + 1, s, stats[s]["kv_mapped_bytes"] // MIB,
                                  stats[s]["expert_loaned_bytes"] // MIB, stats[s]["resident"],
                                  stats[s]["hits"], stats[s]["misses"],
                                  after[s]["resident"], new / got[2]))
                if tenant_at is not None and "client" in tenant:
                    tenant["client"].close()   # it leaves: the next refill borrows again
                    cache.end_request()         # nothing to trim; asks and fills
                    check(ex0.backed > 0 and ex0.resident == min(ex0.backed, ex0.total_experts),
                          f"after the other engine left: stage 0 has {ex0.backed} slots backed "
                          f"and {ex0.resident} experts resident again")
            if path == "grouped":
                direct = sum(ex.grouped_direct for ex in cache.experts.values())
                routed = sum(ex.grouped_routed for ex in cache.experts.values())
                print(f"  grouped layers in the last request: {direct} with every expert "
                      f"resident (no host sync), {routed} routed through the host", flush=True)
        print("\npath    request stage  KV MiB  loans MiB  resident  hits  misses  "
              "resident after  tok/s")
        for r in table:
            print(f"{r[0]:7s} {r[1]:7d} {r[2]:5d} {r[3]:7d} {r[4]:10d} {r[5]:9d} {r[6]:5d} "
                  f"{r[7]:7d} {r[8]:15d} {r[9]:6.1f}")
        events: Dict[str, int] = {}
        for _, t in cache.router.events:
            events[t] = events.get(t, 0) + 1
        print(f"events: {events}")
    except Exception:
        traceback.print_exc()
        check(False, "the run raised")
    finally:
        client.close()
        if daemon is not None:
            daemon.stop(keep=bool(check.failed))
    print(f"{'PASS' if not check.failed else 'FAIL'}: gpu_transformers_cache "
          f"({len(check.failed)} failed) in {time.monotonic() - t0:.1f} s", flush=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
