#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A CUDA graph over VramCache: one decode step of a transformers
Qwen3-MoE captured once, replayed for every token of two requests while
vramd's budgets move under it -- a reserve that grows the KV during the
replays, the trim after the first request that lends the KV to the
experts, the second request's reserve that maps it again (EXPERT_SHRINK)
and another engine's arrival that recalls the stage's loans (RECALL) --
never captured again; the tokens must equal the same step run eagerly.

Why a graph captured by hand (torch.cuda.CUDAGraph) and not
torch.compile(mode="reduce-overhead"): the cache's addresses are fixed
(the regions' own, on the cuda backend), so what a graph needs is a step
of fixed shape whose inputs live in fixed buffers, which
VramCache.set_static gives (every layer's K and V as (1, heads, T, dim)
views over the first T tokens of its lanes, written at a position tensor
by index_copy_), with transformers' own modeling code run as it is: a 4-D
attention mask is used as given (masking_utils returns it untouched), and
position_ids are passed. torch.compile would trace transformers' modeling
and generation code and VramCache's Python (a window that grows on the
host side, vramd calls), recompile on its guards and copy or refuse
inputs whose addresses it does not own; capturing the step by hand needs
none of that, and replays exactly the kernels the eager step runs.

What the graph does not cover: the experts in vramd's slots. A slot's
memory goes back to vramd on RECALL or EXPERT_SHRINK, so a graph that read
a slot would read unmapped memory after a recall; VramExperts stays eager
(a view over the slots made again when they change, a host synchronisation
in a layer with misses). Here the
model's experts stay in its own GPU memory, computed by transformers'
"batched_mm" experts (no host synchronisation: capturable), while the
stages' expert loans are held and filled by the integration's
ExpertStage from host copies of the same experts, as in eager use: so the
trim lends, the reserve shrinks and the arrival recalls for real while
the graph lives.

The model: 6 layers (hidden 1024, 8 heads of 128, 8 KV heads, 32 experts
of 3 x 256 x 1024, 2 a token (see TOPK), vocab 2048, bf16, eager
attention), stage 0
= layers 0-3 (a KV lane per layer and K or V), stage 1 = layers 4-5 (one
interleaved lane), stage 2 another engine's (lent while unregistered), as
tests/python/gpu_transformers_cache.py. The graph's window: T = 2048
tokens, past the stages' initial 1024.

Checks (a FAIL line each, exit 1 if any): the graph's tokens equal the
eager step's, request by request, after every budget change; the window's
K and V data_ptr stay the regions' own addresses through the grow, the
trim and the new reserve; the trim took the KV back to the initial window
and lent it (more experts resident); the reserve took expert slots back
(EXPERT_SHRINK) and the arrival recalled some (RECALL); the graph was
captured once. For information: the tokens against the stock model's
generate() (DynamicCache, the same batched_mm experts; the graph's
attention runs over T masked positions, so equality is expected but not
bit-guaranteed), logits bit for bit, and eager against graph tokens/s.

If capturing fails inside transformers' code (a host synchronisation in
a version's decode path), it prints "skipped: <the exception>" and exits
0; where torch, a CUDA device or transformers 5 is missing, likewise.

    VRAM_LIB=build/libvram.so VRAMD_BIN=build/vramd python3 tests/gpu/gpu_transformers_graph.py
        [--attn eager|sdpa] [--dtype bfloat16|float32]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

import gpu_transformers_common as common

MIB = common.MIB
LAYERS, HIDDEN, HEADS, KV_HEADS = 6, 1024, 8, 8
HEAD_DIM = HIDDEN // HEADS
# Two experts a token: batched_mm adds a token's experts into its output
# with atomics, and two additions onto zero round the same in either order
# (a + b == b + a); with three or more the order, which changes from run to
# run, changes the rounding, and eager and graph could part for a reason
# that is not the graph's.
EXPERTS, TOPK, MOE_INTER, VOCAB = 32, 2, 256, 2048
SPLIT = [(0, 0, 3), (1, 4, 5)]                 # (stage, first, last layer)
CONTEXT, INITIAL, STEP = 8192, 1024, 1024
WINDOW = 2048                                  # the graph's T
REQUESTS = [("grow during the replays", 700, 40), ("after trim and reserve; a recall", 1200, 40)]
EVENT_AT = 10                                  # the decode step of each request's budget change


def config_json(itemsize: int) -> Dict[str, Any]:
    lane = KV_HEADS * HEAD_DIM * itemsize
    slot = 3 * MOE_INTER * HIDDEN * itemsize
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
    return {"doc": "tests/gpu/gpu_transformers_graph.py's vramd: capacity = the three "
                   "stages' windows; stage 2's is lent while nobody registered it",
            "backend": "cuda",
            "devices": [{"id": 0, "capacity": f"{sum(windows) * 2}MiB", "chunk": "2MiB",
                         "lend_unreserved": True}],
            "stages": stages}


Checks, info = common.Checks, common.info


class CaptureRefused(Exception):
    """Capturing the decode step failed (the message says where)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--print-config", action="store_true",
                    help="write vramd's configuration to stdout and exit")
    a = ap.parse_args()
    if a.print_config:
        json.dump(config_json(2 if a.dtype == "bfloat16" else 4), sys.stdout, indent=1)
        return 0
    common.skip_if_needed("gpu_transformers_graph")

    import torch
    import transformers
    import vram
    from vram.integrations import transformers as vt
    from vram.integrations.experts import ExpertStage, HostExperts

    dtype = getattr(torch, a.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}, {a.dtype}, {a.attn} attention, batched_mm experts",
          flush=True)
    check = Checks()
    t0 = time.monotonic()
    model = common.build_qwen3_moe(layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS,
                                   experts=EXPERTS, topk=TOPK, moe_inter=MOE_INTER, vocab=VOCAB,
                                   max_positions=4 * CONTEXT, dtype=dtype, attn=a.attn)
    common.set_experts_implementation(model, "batched_mm")
    prompts = []
    for i, (_, n, _) in enumerate(REQUESTS):
        g = torch.Generator().manual_seed(300 + i)
        prompts.append(torch.randint(1, VOCAB, (1, n), generator=g).cuda())
    # The stock model's tokens (DynamicCache), for information.
    stock_tokens = []
    for ids, (_, n, new) in zip(prompts, REQUESTS):
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)
        stock_tokens.append(out[0, n:].tolist())

    daemon = common.Daemon(config_json(itemsize), prefix="vramd-gpu-tfgraph-")
    client = vram.Client(daemon.sock, name="gpu_transformers_graph")
    tenant: Dict[str, Any] = {}
    skipped: Optional[str] = None
    try:
        # The KV on vramd; the experts stay the model's (batched_mm, in the
        # graph), their host copies fill the stages' loans.
        cache = vt.install(model, client, stages=[s for s, _, _ in SPLIT], experts=False)
        found = vt.find_experts(model)
        for s, first, last in SPLIT:
            host = {l: HostExperts(found[l][2].gate_up_proj, found[l][2].down_proj, pin=True)
                    for l in range(first, last + 1)}
            cache.experts[s] = ExpertStage(client, s, host, torch.device("cuda"),
                                           router=cache.router)
        for ex in cache.experts.values():
            ex.refill(rebalance=False)
        lanes = {kv.stage: kv for kv in cache.parts}
        initial = {s: kv.mapped_bytes() for s, kv in lanes.items()}
        print("after install: " + "; ".join(
            f"stage {s}: KV {initial[s] // MIB} MiB, {ex.backed} slots backed, "
            f"{ex.resident}/{ex.total_experts} experts resident"
            for s, ex in cache.experts.items()), flush=True)

        minval = torch.finfo(dtype).min
        ids_buf = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        pos_buf = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        index = pos_buf.view(1)                 # where every layer writes
        mask_buf = torch.full((1, 1, 1, WINDOW), minval, dtype=dtype, device="cuda")
        state: Dict[str, Any] = {"graph": None, "logits": None, "captures": 0}

        def step() -> torch.Tensor:
            out = model(input_ids=ids_buf, attention_mask=mask_buf, position_ids=pos_buf,
                        past_key_values=cache, use_cache=True)
            return out.logits[:, -1, :]

        def capture() -> None:
            # Warm-up on a side stream (cuBLAS handles, workspaces), then
            # capture; both write this step's K and V at pos_buf again,
            # with the same values.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            try:
                with torch.cuda.stream(s):
                    for _ in range(2):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    logits = step()
            except Exception as e:
                raise CaptureRefused(f"{type(e).__name__}: {e}".splitlines()[0]) from e
            state.update(graph=g, logits=logits, captures=state["captures"] + 1)

        def window_ptrs() -> List[Tuple[int, int]]:
            return [(k4.data_ptr(), v4.data_ptr()) for kv in cache.parts for k4, v4 in kv.static]

        def view_ptrs() -> List[Tuple[int, int]]:
            # The views made again over the lanes after a reserve (not the
            # window's own tensors): where the memory is now.
            return [p for kv in cache.parts for p in kv.data_ptrs()]

        def decode(first: int, start: int, new: int, graphed: bool,
                   at_event=None) -> Tuple[List[int], List[torch.Tensor], float]:
            """new tokens from token `first` at position `start` by the
            fixed-shape step (eagerly, or by replaying the graph)."""
            mask_buf.fill_(minval)
            mask_buf[:, :, :, :start].zero_()
            toks = [torch.tensor([first], device="cuda")]
            logits_seen: List[torch.Tensor] = []
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                for k in range(new):
                    p = start + k
                    ids_buf.copy_(toks[-1].view(1, 1))
                    pos_buf.fill_(p)
                    mask_buf[:, :, :, p].zero_()
                    if graphed:
                        if state["graph"] is None:
                            capture()
                        state["graph"].replay()
                        logits = state["logits"]
                    else:
                        logits = step()
                    logits_seen.append(logits[0].float().clone())
                    toks.append(logits[0].argmax(-1).view(1))
                    cache.poll()                # events between steps, as an engine
                    if at_event is not None and k == EVENT_AT:
                        at_event()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t
            return torch.cat(toks[1:]).tolist(), logits_seen, new / dt

        ptrs0: Optional[List[Tuple[int, int]]] = None
        want = {s: kv.lane_address(0) for s, kv in lanes.items()}
        for i, ((name, n, new), ids) in enumerate(zip(REQUESTS, prompts)):
            label = f"request {i + 1} ({name}, {n}+{new})"
            shrunk = {s: ex.shrunk_slots for s, ex in cache.experts.items()}
            cache.begin_request(WINDOW, 0)      # the graph's whole window mapped
            if i > 0:
                check(any(ex.shrunk_slots > shrunk[s] for s, ex in cache.experts.items()),
                      f"{label}: the reserve took expert slots back into KV (EXPERT_SHRINK: "
                      + ", ".join(f"stage {s} {ex.shrunk_slots - shrunk[s]}"
                                  for s, ex in cache.experts.items()) + ")")
            # Prefill through the ordinary path (append), then the window.
            with torch.no_grad():
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            first = int(out.logits[0, -1].argmax())
            cache.set_static(WINDOW, index)
            cache.zero_static(n)
            ptrs = window_ptrs()
            if ptrs0 is None:
                ptrs0 = ptrs
            check(ptrs == ptrs0 and view_ptrs() == ptrs0 and ptrs[0][0] == want[0]
                  and lanes[1].static[0][0].data_ptr() == want[1],
                  f"{label}: the window's K and V at the regions' own addresses, "
                  "the ones the graph was captured over")
            eager = decode(first, n, new, graphed=False)
            cache.zero_static(n)
            captures_before = state["captures"]

            def event() -> None:
                if i == 0:
                    # A reserve in the middle: one more growth step mapped.
                    for kv in cache.parts:
                        kv.ensure(kv.mapped_tokens + STEP)
                    check(view_ptrs() == ptrs0,
                          f"{label}: the KV grew during the replays (to "
                          f"{lanes[0].mapped_tokens} tokens) and the window did not move")
                else:
                    common.arrive(daemon.sock, tenant, 2, 2 * CONTEXT - 200)
                    deadline = time.monotonic() + 30
                    while (not any(ex.recalled_slots for ex in cache.experts.values())
                           and time.monotonic() < deadline):
                        cache.poll()            # an engine waiting dispatches
                        time.sleep(0.002)
                    tenant["thread"].join(30)
                    check("error" not in tenant and tenant.get("kv") is not None,
                          f"{label}: the other engine reserved its window "
                          f"({tenant.get('error', 'ok')})")
                    check(any(ex.recalled_slots for ex in cache.experts.values()),
                          f"{label}: its arrival recalled loans during the replays ("
                          + ", ".join(f"stage {s} {ex.recalled_slots} slots"
                                      for s, ex in cache.experts.items()) + ")")

            graph = decode(first, n, new, graphed=True, at_event=event)
            if i == 0:
                check(state["captures"] == 1, f"{label}: the step was captured once")
            else:
                check(state["captures"] == captures_before == 1,
                      f"{label}: the same graph replayed, not captured again")
            check(graph[0] == eager[0],
                  f"{label}: the graph's tokens equal the eager step's ({new} tokens)")
            same = all(torch.equal(x, y) for x, y in zip(graph[1], eager[1]))
            diff = max(float((x - y).abs().max()) for x, y in zip(graph[1], eager[1]))
            info(same, f"{label}: logits of graph and eager step bit for bit (max diff {diff:.3g})")
            info(eager[0] == stock_tokens[i],
                 f"{label}: tokens equal the stock model's generate() (DynamicCache)")
            print(f"  decode tok/s: eager step {eager[2]:.1f}, graph replay {graph[2]:.1f}",
                  flush=True)
            cache.clear_static(n + new)
            before = {s: ex.resident for s, ex in cache.experts.items()}
            cache.end_request()                 # trim: the KV past the window is lent
            for s, kv in lanes.items():
                check(kv.mapped_bytes() == initial[s],
                      f"{label}: stage {s}'s KV trimmed back to its initial window "
                      f"({kv.mapped_bytes() // MIB} MiB)")
            if i == 0:
                check(all(cache.experts[s].resident > before[s] for s in before),
                      f"{label}: the trim lent the KV to the experts (resident "
                      + ", ".join(f"stage {s} {before[s]} -> {cache.experts[s].resident}"
                                  for s in before) + ")")
        events: Dict[str, int] = {}
        for _, t in cache.router.events:
            events[t] = events.get(t, 0) + 1
        print(f"events: {events}", flush=True)
    except CaptureRefused as e:
        traceback.print_exc()
        skipped = (f"capturing the decode step in a CUDA graph failed with transformers "
                   f"{transformers.__version__}, torch {torch.__version__}: {e}")
    except Exception:
        traceback.print_exc()
        check(False, "the run raised")
    finally:
        if "client" in tenant:
            tenant["client"].close()
        client.close()
        daemon.stop(keep=bool(check.failed))
    if skipped is not None and not check.failed:
        print(f"gpu_transformers_graph: skipped: {skipped}", flush=True)
        return 0
    print(f"{'PASS' if not check.failed else 'FAIL'}: gpu_transformers_graph "
          f"({len(check.failed)} failed) in {time.monotonic() - t0:.1f} s", flush=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
