# SPDX-License-Identifier: Apache-2.0
"""vram.integrations.kv and .experts -- the transformers-free parts of
vram.integrations.transformers -- against the real daemon.

A small decoder written here (5 layers: attention with 4 KV heads of 128,
then 12 experts of which the router picks 2, float32) runs over two vramd
stages: stage 0 holds layers 0-2 with one KV lane per layer and K or V
("lanes" layout), stage 1 layers 3-4 with one interleaved lane; stage 2
stands for another engine on the same device, whose window is lent to the
first two while nobody has registered it (lend_unreserved). The same
decoder over ordinary torch memory (PlainKv, the experts' host copies) is
the reference: tokens and logits must be bitwise equal while the window
grows under it, its own reserve takes expert slots back (EXPERT_SHRINK),
the other engine's arrival recalls slots (RECALL) and a trim lends the KV
to the experts again.

Needs PyTorch and numpy (Debian's python3-torch, python3-numpy); skipped
without them. Not transformers. vramd is $VRAMD_BIN (default build/vramd),
backend $VRAM_TEST_BACKEND (host by default; on cuda the tensors are CUDA
tensors); $VRAM_TEST_KEEP=1 keeps the daemon's directory.

    python3 -m unittest discover -s tests/python -p 'test_transformers*.py' -v
"""

from __future__ import annotations

import errno
import math
import threading
import time
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

import vramd_helpers  # sets sys.path and $VRAM_LIB for vram

import vram  # noqa: E402

try:
    import numpy  # noqa: F401  (host-backend tensors are made through numpy)
    import torch
    import torch.nn.functional as F
    from vram.integrations.experts import (EventRouter, ExpertStage, HostExperts,
                                           run_experts)
    from vram.integrations.kv import PlainKv, VramKv
    WHY_SKIP = None
except ImportError as e:  # torch or numpy missing: every test skips
    torch = None
    WHY_SKIP = f"needs PyTorch and numpy ({e}); apt-get install python3-torch python3-numpy"

BACKEND = vramd_helpers.BACKEND
MIB = 1 << 20

# The model: fp32, 4 KV heads of 128 (2 KiB a token per layer and K or V,
# 1024 tokens a 2 MiB chunk), experts of 3 x 512 x 256 floats = 1.5 MiB.
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 5, 256, 4, 4, 128
EXPERTS, TOPK, INTER, VOCAB = 12, 2, 512, 128
TOKEN = KV_HEADS * HEAD_DIM * 4
STAGES = [(0, 0, 2), (1, 3, 4)]        # (stage, first layer, last layer)
CONTEXT, INITIAL, STEP = 4096, 1024, 1024

# Stage 0: 6 lanes of 2 KiB a token, 4 chunks each (24), 1 of them mapped
# at registration: 18 chunks (36 MiB, 24 slots) its own to lend. Stage 1:
# 1 lane of 4 x 2 KiB a token, 16 chunks, 4 initial: 12 to lend (16 slots).
# Stage 2: 1 lane, 8 chunks, 1 initial: 7 lent as pool loans while it is
# not registered. Capacity: exactly the three windows.
CONFIG = f"""{{
 "devices": [{{"id": 0, "capacity": "96MiB", "chunk": "2MiB", "lend_unreserved": true}}],
 "pool": {{"prefill_chunks": 0}},
 "stages": [
  {{"id": 0, "device": 0, "first_layer": 0, "last_layer": 2,
   "kv_lanes": [{{"bytes_per_token": {TOKEN}, "count": 6}}],
   "native_context": {CONTEXT}, "initial_tokens": {INITIAL}, "step_tokens": {STEP},
   "expert_slot": "1.5MiB",
   "loan": {{"enabled": true, "headroom": 0, "recall_deadline_ms": 5000, "hold_ms": 10000}}}},
  {{"id": 1, "device": 0, "first_layer": 3, "last_layer": 4,
   "kv_lanes": [{{"bytes_per_token": {4 * TOKEN}, "count": 1}}],
   "native_context": {CONTEXT}, "initial_tokens": {INITIAL}, "step_tokens": {STEP},
   "expert_slot": "1.5MiB",
   "loan": {{"enabled": true, "headroom": 0, "recall_deadline_ms": 5000, "hold_ms": 10000}}}},
  {{"id": 2, "device": 0, "first_layer": 0, "last_layer": 0,
   "kv_lanes": [{{"bytes_per_token": {TOKEN}, "count": 1}}],
   "native_context": 8192, "initial_tokens": 1024, "step_tokens": 1024,
   "expert_slot": "1.5MiB",
   "loan": {{"enabled": true, "headroom": 0, "recall_deadline_ms": 5000, "hold_ms": 10000}}}}
 ]}}"""


class Daemon(vramd_helpers.Daemon):
    """vramd (tests/python/vramd_helpers.py) with CONFIG, started."""

    def __init__(self) -> None:
        super().__init__(CONFIG, prefix="vramd-tf-", name="tf-harness")
        self.start()


# ---- the model: the same numbers over either memory ------------------------------

def rmsnorm(x: "torch.Tensor") -> "torch.Tensor":
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Tiny:
    """The decoder's weights (seeded), on `device`; experts as host
    copies (HostExperts), as transformers' fused experts hold them."""

    def __init__(self, device: str) -> None:
        g = torch.Generator().manual_seed(11)
        r = lambda *shape: torch.randn(*shape, generator=g) / math.sqrt(shape[-1])
        self.device = device
        self.embed = torch.randn(VOCAB, HIDDEN, generator=g).to(device)
        self.attn = [tuple(w.to(device) for w in (
            r(HEADS * HEAD_DIM, HIDDEN), r(KV_HEADS * HEAD_DIM, HIDDEN),
            r(KV_HEADS * HEAD_DIM, HIDDEN), r(HIDDEN, HEADS * HEAD_DIM)))
            for _ in range(LAYERS)]
        self.router = [r(EXPERTS, HIDDEN).to(device) for _ in range(LAYERS)]
        self.experts = [HostExperts(r(EXPERTS, 2 * INTER, HIDDEN), r(EXPERTS, HIDDEN, INTER))
                        for _ in range(LAYERS)]
        self.plain_experts = [(hx.gate_up.to(device), hx.down.to(device))
                              for hx in self.experts]

    def forward(self, ids: "torch.Tensor", kv_of: Callable, weights_of: Callable,
                before_moe: Callable[[int], None] = lambda layer: None,
                moe_of: Optional[Callable] = None) -> "torch.Tensor":
        """Logits of the last of `ids` (appended after the tokens the caches
        hold). kv_of(layer) -> (LaneKv, local layer); weights_of(layer) ->
        weights(e, tokens) for run_experts; or moe_of(layer) -> f(h, idx,
        wt), the layer's experts computed otherwise (the grouped path)."""
        x = self.embed[ids]
        n = ids.shape[0]
        for layer in range(LAYERS):
            wq, wk, wv, wo = self.attn[layer]
            h = rmsnorm(x)
            q = (h @ wq.T).view(n, HEADS, HEAD_DIM).transpose(0, 1).unsqueeze(0)
            k = (h @ wk.T).view(n, KV_HEADS, HEAD_DIM).transpose(0, 1).unsqueeze(0)
            v = (h @ wv.T).view(n, KV_HEADS, HEAD_DIM).transpose(0, 1).unsqueeze(0)
            kv, local = kv_of(layer)
            K, V = kv.append(local, k, v)          # (1, KV_HEADS, L, HEAD_DIM)
            total = K.shape[2]
            s = q @ K.transpose(2, 3) / math.sqrt(HEAD_DIM)
            future = (torch.arange(total, device=x.device)
                      > torch.arange(total - n, total, device=x.device)[:, None])
            o = torch.softmax(s.masked_fill(future, float("-inf")), -1) @ V
            x = x + o[0].transpose(0, 1).reshape(n, HEADS * HEAD_DIM) @ wo.T
            h = rmsnorm(x)
            probs = torch.softmax(h @ self.router[layer].T, -1, dtype=torch.float)
            wt, idx = torch.topk(probs, TOPK, dim=-1)
            wt = (wt / wt.sum(-1, keepdim=True)).to(h.dtype)
            before_moe(layer)
            if moe_of is not None:
                x = x + moe_of(layer)(h, idx, wt)
            else:
                x = x + run_experts(h, idx, wt, EXPERTS, F.silu, weights_of(layer))
        return rmsnorm(x[-1:]) @ self.embed.T


def greedy(model: "Tiny", prompt: "torch.Tensor", new: int, kv_of: Callable,
           weights_of: Callable, hook: Callable[[int], None] = lambda step: None,
           before_moe: Callable[[int], None] = lambda layer: None,
           moe_of: Optional[Callable] = None
           ) -> Tuple[List[int], List["torch.Tensor"]]:
    tokens, logits, x = [], [], prompt
    for step in range(new):
        hook(step)
        out = model.forward(x, kv_of, weights_of, before_moe, moe_of)
        logits.append(out.cpu())
        x = torch.argmax(out, -1)
        tokens.append(int(x))
    return tokens, logits


class Arrival:
    """Another engine that arrives at step ``step`` of a decode (``hook``,
    greedy's): on a thread of its own it registers stage 2 and reserves
    its whole window, which recalls the pool loans lying in it, while the
    step waits for ``stage`` (an ExpertStage) to see the RECALL as an
    engine does, dispatching (poll). ``client`` and ``kv`` (its
    reservation) once it came, ``error`` if it could not."""

    def __init__(self, sock: str, stage: "ExpertStage", step: int) -> None:
        self.sock, self.stage, self.step = sock, stage, step
        self.client: Optional[vram.Client] = None
        self.kv: Any = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._arrive)

    def _arrive(self) -> None:
        try:
            t = vram.Client(self.sock, name="another engine")
            t.stage_register(2)
            self.kv = t.kv_reserve(2, 8000, 100)
            self.client = t
        except BaseException as e:  # reported by the main thread
            self.error = e

    def hook(self, step: int) -> None:
        if step != self.step:
            return
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.stage.recalled_slots and time.monotonic() < deadline:
            self.stage.poll()
            time.sleep(0.005)
        self.thread.join(20)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def prompt_of(seed: int, n: int) -> "torch.Tensor":
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


@unittest.skipIf(WHY_SKIP, WHY_SKIP or "")
class TransformersCacheTest(unittest.TestCase):
    """One vramd per test."""

    def setUp(self) -> None:
        self.daemon = Daemon()
        # A failed test keeps vramd's directory (its log).
        self.addCleanup(lambda: self.daemon.stop(check=False, keep=self.failed()))
        self.c = vram.Client(self.daemon.sock, name="tf-cache test")
        self.addCleanup(self.c.close)
        self.dev = "cuda" if self.c.backend == "cuda" else "cpu"
        self.cuda = self.dev == "cuda"

    def failed(self) -> bool:
        r = self._outcome.result
        return any(t is self for t, _ in r.failures + r.errors)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def register(self) -> List["VramKv"]:
        for s, _, _ in STAGES:
            self.c.stage_register(s)
        return [VramKv(self.c, s, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                       dtype=torch.float32) for s, _, _ in STAGES]

    def plain(self) -> List["PlainKv"]:
        return [PlainKv(capacity_tokens=CONTEXT, device=self.dev, stage=s, first_layer=f,
                        nlayers=l - f + 1, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                        dtype=torch.float32, layout="lanes" if s == 0 else "interleaved")
                for s, f, l in STAGES]

    @staticmethod
    def kv_of(parts: List) -> Callable:
        def of(layer: int):
            for kv in parts:
                if kv.first_layer <= layer < kv.first_layer + kv.nlayers:
                    return kv, layer - kv.first_layer
            raise AssertionError(layer)
        return of

    def expert_stages(self, model: "Tiny", router: Optional["EventRouter"] = None
                      ) -> Dict[int, "ExpertStage"]:
        router = router or EventRouter(self.c)
        out = {}
        for s, f, l in STAGES:
            layers = {i: model.experts[i] for i in range(f, l + 1)}
            out[s] = ExpertStage(self.c, s, layers, self.dev, router=router)
        for ex in out.values():  # every stage registered before any asks
            ex.refill(rebalance=False)
        return out

    # ---- the KV ----------------------------------------------------------------

    def test_window_grows_in_place(self) -> None:
        """Writes past the initial window map more (kv_reserve): vramd's
        mapping grows, the chunks already written stay (the same chunk ids
        at the same region addresses, their bytes read back through the new
        views), views between reserves keep their address, and the views
        equal what was written, in transformers' (1, heads, L, dim) shape."""
        parts = self.register()
        self.assertEqual([kv.layout for kv in parts], ["lanes", "interleaved"])
        self.assertEqual([kv.capacity_tokens for kv in parts], [CONTEXT, CONTEXT])
        g = torch.Generator().manual_seed(3)
        written: Dict[Tuple[int, int], List["torch.Tensor"]] = {}
        for kv in parts:
            self.assertEqual(kv.mapped_tokens, INITIAL)
            before = kv.mapped_bytes()
            slot0 = [(kv.lane_address(l), self.c.region_chunk(kv.region, l, 0))
                     for l in range(kv.lanes)]
            ptrs = None
            for n in (700, 300, 24):   # 1024: the initial window, exactly
                for i in range(kv.nlayers):
                    k = torch.randn(1, KV_HEADS, n, HEAD_DIM, generator=g).to(self.dev)
                    v = torch.randn(1, KV_HEADS, n, HEAD_DIM, generator=g).to(self.dev)
                    written.setdefault((kv.stage, i), []).append((k, v))
                    K, V = kv.append(i, k, v)
                    self.assertEqual(tuple(K.shape), (1, KV_HEADS, kv.lengths[i], HEAD_DIM))
                if ptrs is None:
                    ptrs = kv.data_ptrs()
                self.assertEqual(kv.data_ptrs(), ptrs, "views moved within the window")
            self.assertEqual(kv.reserves, 0, "a reserve inside the initial window")
            # The 1025th token passes the window: one reserve, one step more.
            for i in range(kv.nlayers):
                k = torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=g).to(self.dev)
                written[(kv.stage, i)].append((k, -k))
                K, V = kv.append(i, k, -k)
            self.assertEqual(kv.reserves, 1)
            self.assertEqual(kv.mapped_tokens, INITIAL + STEP)
            self.assertEqual(kv.mapped_bytes(), 2 * before)
            self.assertEqual([(kv.lane_address(l), self.c.region_chunk(kv.region, l, 0))
                              for l in range(kv.lanes)], slot0,
                             "the written chunks moved")
            if self.cuda:  # the region's own addresses: the same pointers
                self.assertEqual(kv.data_ptrs(), ptrs)
                self.assertEqual(ptrs[0][0], kv.lane_address(0))
            for i in range(kv.nlayers):
                K, V = kv.layer(i)
                ks = torch.cat([k for k, _ in written[(kv.stage, i)]], 2)[0].transpose(0, 1)
                vs = torch.cat([v for _, v in written[(kv.stage, i)]], 2)[0].transpose(0, 1)
                self.assertTrue(torch.equal(K[:1025], ks), f"stage {kv.stage} layer {i} K")
                self.assertTrue(torch.equal(V[:1025], vs), f"stage {kv.stage} layer {i} V")
        # The interleaved lane: token t of layer i's K and V are neighbours.
        kv = parts[1]
        K0, V0 = kv.layer(0)
        self.assertEqual(V0.data_ptr() - K0.data_ptr(), TOKEN)
        self.assertEqual(K0.stride(0), 2 * kv.nlayers * KV_HEADS * HEAD_DIM)

    def test_static_window_writes_at_a_position_tensor(self) -> None:
        """The fixed-shape window (what a CUDA graph's decode step runs
        over): set_static maps T tokens and gives every layer's K and V as
        (1, heads, T, dim) views, write_at writes at a position tensor
        (index_copy_ over the strided lane views of both layouts) and
        returns the same views each step, and what it writes is what append
        writes; zero_static clears the tail; clear_static goes back to
        append with the count given."""
        parts = self.register()
        g = torch.Generator().manual_seed(5)
        T = INITIAL + STEP                      # past the initial window: one reserve
        for kv, ref in zip(parts, self.plain()):
            kv.set_static(T, torch.zeros(1, dtype=torch.long, device=self.dev))
            self.assertEqual(kv.reserves, 1)
            self.assertGreaterEqual(kv.mapped_tokens, T)
            kv.zero_static()
            prompt = 600
            for i in range(kv.nlayers):          # a prefill through append
                k = torch.randn(1, KV_HEADS, prompt, HEAD_DIM, generator=g).to(self.dev)
                v = torch.randn(1, KV_HEADS, prompt, HEAD_DIM, generator=g).to(self.dev)
                kv.append(i, k, v)
                ref.append(i, k, v)
            ptrs = [(k4.data_ptr(), v4.data_ptr()) for k4, v4 in kv.static]
            idx = kv.static_index
            for p in range(prompt, prompt + 5):  # decode steps at a position tensor
                idx.fill_(p)
                for i in range(kv.nlayers):
                    k = torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=g).to(self.dev)
                    K, V = kv.write_at(i, k, 2 * k)
                    self.assertEqual(tuple(K.shape), (1, KV_HEADS, T, HEAD_DIM))
                    Kr, Vr = ref.append(i, k, 2 * k)
                    self.assertTrue(torch.equal(K[:, :, :p + 1], Kr), f"layer {i} K at {p}")
                    self.assertTrue(torch.equal(V[:, :, :p + 1], Vr), f"layer {i} V at {p}")
                    self.assertEqual(int(K[:, :, p + 1:].abs().sum()), 0, "past the position")
                self.assertEqual([(k4.data_ptr(), v4.data_ptr()) for k4, v4 in kv.static],
                                 ptrs, "the window's views moved")
            kv.zero_static(prompt)
            self.assertEqual(int(kv.static[0][0][:, :, prompt:].abs().sum()), 0)
            self.assertTrue(torch.equal(kv.static[0][0][:, :, :prompt],
                                        ref.layer(0)[0][:prompt].transpose(0, 1).unsqueeze(0)))
            kv.clear_static(prompt)
            self.assertIsNone(kv.static)
            self.assertEqual(kv.lengths, [prompt] * kv.nlayers)
            with self.assertRaises(RuntimeError):
                kv.write_at(0, k, k)

    def test_refusals(self) -> None:
        parts = self.register()
        kv = parts[0]
        with self.assertRaises(vram.VramError) as cm:
            kv.ensure(CONTEXT + 1)
        self.assertEqual(cm.exception.errno, errno.E2BIG)
        self.assertIn(f"native context of {CONTEXT}", cm.exception.message)
        x = torch.zeros(2, KV_HEADS, 1, HEAD_DIM, device=self.dev)
        with self.assertRaisesRegex(ValueError, "batch 2"):
            kv.append(0, x, x)
        y = torch.zeros(1, KV_HEADS, 1, HEAD_DIM, dtype=torch.float64, device=self.dev)
        with self.assertRaisesRegex(TypeError, "float64"):
            kv.append(0, y, y)
        ok = torch.zeros(1, KV_HEADS, 1, HEAD_DIM, device=self.dev)
        with self.assertRaisesRegex(TypeError, "float64"):
            kv.append(0, ok, y)
        with self.assertRaisesRegex(ValueError, "differ in shape"):
            kv.append(0, ok, torch.zeros(1, KV_HEADS, 2, HEAD_DIM, device=self.dev))
        with self.assertRaisesRegex(ValueError, "expected \\(batch, kv_heads"):
            kv.append(0, ok[0], ok[0])
        h1 = torch.zeros(1, 1, 1, HEAD_DIM, device=self.dev)   # would broadcast
        with self.assertRaisesRegex(ValueError, f"1 heads of {HEAD_DIM}"):
            kv.append(0, h1, h1)
        with self.assertRaises(IndexError):
            kv.append(kv.nlayers, ok, ok)
        self.assertEqual(kv.lengths, [0] * kv.nlayers, "a refused append wrote")
        # A model whose tokens are larger than the lanes' bytes_per_token:
        # the reserve maps too little, and it says so.
        big = VramKv(self.c, 0, kv_heads=2 * KV_HEADS, head_dim=HEAD_DIM,
                     dtype=torch.float32)
        with self.assertRaisesRegex(ValueError, "bytes_per_token is smaller"):
            big.ensure(1500)
        with self.assertRaisesRegex(ValueError, "expert_slot is 1572864 bytes"):
            ExpertStage(self.c, 0, {0: HostExperts(torch.zeros(2, 4 * INTER, HIDDEN),
                                                   torch.zeros(2, HIDDEN, 2 * INTER))},
                        self.dev)

    # ---- experts ---------------------------------------------------------------

    def test_route_is_the_eager_loops_indices(self) -> None:
        """route() gives, per expert hit and in ascending order, the very
        indices transformers' eager experts loop takes from torch.where over
        the one-hot mask (the order its products are added in), for a decode
        step, a prefill and routings that leave experts unused."""
        from vram.integrations.experts import route
        g = torch.Generator().manual_seed(11)
        for tokens, k, experts in ((1, 2, 12), (1, 8, 64), (300, 2, 12), (37, 4, 128)):
            scores = torch.rand(tokens, experts, generator=g)
            idx = torch.topk(scores, k, dim=-1).indices.to(self.dev)
            mask = F.one_hot(idx, num_classes=experts).permute(2, 1, 0)
            want = []
            for e in range(experts):
                if int(mask[e].sum()):
                    pos, tok = torch.where(mask[e])
                    want.append((e, int(mask[e].sum()), tok.tolist(), pos.tolist()))
            got = [(e, n, t.tolist(), p.tolist()) for e, n, t, p in route(idx, experts)]
            self.assertEqual(got, want, f"{tokens} tokens, top {k} of {experts}")
            for _, _, t, p in route(idx, experts):
                self.assertEqual((t.device, t.dtype, p.dtype), (idx.device, torch.long, torch.long))

    def test_run_experts_is_the_dense_math(self) -> None:
        """run_experts against the dense formula (every expert on every
        token, weighted where routed), and resident against host weights:
        the same bits."""
        model = Tiny(self.dev)
        g = torch.Generator().manual_seed(5)
        h = torch.randn(7, HIDDEN, generator=g).to(self.dev)
        probs = torch.softmax(h @ model.router[0].T, -1)
        wt, idx = torch.topk(probs, TOPK, dim=-1)
        gu, dn = model.plain_experts[0]
        out = run_experts(h, idx, wt, EXPERTS, F.silu, lambda e, n: (gu[e], dn[e]))
        gate, up = torch.einsum("th,eoh->eto", h, gu).chunk(2, -1)
        dense = torch.einsum("eti,ehi->eth", F.silu(gate) * up, dn)
        route = torch.zeros(EXPERTS, 7, device=self.dev).scatter_(
            0, idx.T, wt.T)   # (experts, tokens): the routing weight or 0
        ref = (dense * route[..., None]).sum(0)
        self.assertTrue(torch.allclose(out, ref, rtol=1e-4, atol=1e-5))
        self.register()
        ex = self.expert_stages(model)[0]
        # 33 slots: layer 0's experts are filled first, all of them.
        self.assertEqual(ex.resident, 33)
        self.assertTrue(all((0, e) in ex.slot_of for e in range(EXPERTS)))
        res = run_experts(h, idx, wt, EXPERTS, F.silu, lambda e, n: ex.weights(0, e, n))
        self.assertTrue(torch.equal(res, out))
        self.assertEqual((ex.hits, ex.misses), (len(idx.unique()), 0))

    def test_loans_fill_trim_lends_and_shrink_takes(self) -> None:
        """At registration stage 0 lends its 18 free window chunks and
        borrows 7 of stage 2's (pool loans): 25 chunks, 33 slots of 1.5 MiB,
        all filled; stage 1 gets its own 12 (16 slots). A reserve past the
        window moves own loans into KV (EXPERT_SHRINK: the top slots go,
        and their experts are misses after), the trim gives them back as
        loans and the refill loads the most used experts into them."""
        model = Tiny(self.dev)
        parts = self.register()
        exs = self.expert_stages(model)
        ex0, ex1 = exs[0], exs[1]
        self.assertEqual((ex0.backed, ex0.resident), (33, 33))
        self.assertEqual((ex1.backed, ex1.resident), (16, 16))
        self.assertEqual(ex0.stats()["expert_loaned_bytes"], 25 * 2 * MIB)
        # The three without a slot are layer 2's last; use two of them, so
        # that "most used" decides the refill.
        missing = sorted(k for k in ((l, e) for l in range(3) for e in range(EXPERTS))
                         if k not in ex0.slot_of)
        self.assertEqual(len(missing), 3)
        for key in missing[:2]:
            ex0.weights(*key, tokens=50)
        self.assertEqual(ex0.misses, 2)
        # Stage 0's reserve for 3000 tokens: 3 chunks a lane more, 18 in
        # all, out of its own 18 loaned chunks of its window.
        kv = parts[0]
        kv.ensure(3000)
        self.assertEqual(kv.mapped_tokens, 3072)
        self.assertGreater(ex0.shrunk_slots, 0)
        self.assertLess(ex0.backed, 33)
        self.assertLess(max(ex0.in_slot), ex0.backed, "an expert kept in a slot that went")
        gone = [k for k in ((l, e) for l in range(3) for e in range(EXPERTS))
                if k not in ex0.slot_of]
        self.assertGreater(len(gone), 3)
        kv.trim()
        self.assertEqual(kv.mapped_bytes(), 6 * 2 * MIB)
        self.assertEqual(kv.lengths, [0, 0, 0])
        # The trim lent the window back: BUDGET_CHANGED; the refill asks
        # for the rest and fills, most used first.
        loaded = ex0.refill()
        self.assertGreater(loaded, 0)
        self.assertEqual(ex0.backed, 33)
        self.assertEqual(ex0.resident, 33)
        for key in missing[:2]:
            self.assertIn(key, ex0.slot_of, "a most used expert was not loaded")
        self.assertNotIn(missing[2], ex0.slot_of)

    def test_decode_matches_plain_memory(self) -> None:
        """The decoder over vramd decodes the tokens (and logits, bit for
        bit) of the same decoder over ordinary memory, while: the prompt of
        1500 tokens passes both stages' initial windows (reserves, stage
        0's own reserve shrinking its expert loans), the other engine's
        arrival at step 6 recalls the pool loans (RECALL, answered between
        layers), its departure and the trim give them back, and a second
        request decodes like the reference again."""
        model = Tiny(self.dev)
        ref_parts = self.plain()
        plain_w = lambda layer: (lambda e, n: (model.plain_experts[layer][0][e],
                                               model.plain_experts[layer][1][e]))
        prompts = [(prompt_of(1, 1500), 12), (prompt_of(2, 300), 12)]
        ref = []
        with torch.no_grad():
            for p, new in prompts:
                ref.append(greedy(model, p.to(self.dev), new, self.kv_of(ref_parts), plain_w))
                for kv in ref_parts:
                    kv.reset()
        parts = self.register()
        exs = self.expert_stages(model)
        of_layer = {l: exs[s] for s, f, last in STAGES for l in range(f, last + 1)}
        vram_w = lambda layer: (lambda e, n: of_layer[layer].weights(layer, e, n))
        tenant = Arrival(self.daemon.sock, exs[0], step=6)
        self.addCleanup(tenant.close)
        before_moe = lambda layer: of_layer[layer].poll()
        with torch.no_grad():
            p, new = prompts[0]
            got = greedy(model, p.to(self.dev), new, self.kv_of(parts), vram_w,
                         hook=tenant.hook, before_moe=before_moe)
        self.assertIsNone(tenant.error, tenant.error)
        self.assertEqual(tenant.kv.kv_mapped_bytes, 16 * MIB)
        self.assertEqual(got[0], ref[0][0], "tokens differ from plain memory")
        for a, b in zip(got[1], ref[0][1]):
            self.assertTrue(torch.equal(a, b), "logits differ from plain memory")
        self.assertEqual([kv.reserves for kv in parts], [1, 1])
        self.assertGreater(exs[0].shrunk_slots, 0, "no EXPERT_SHRINK")
        self.assertGreater(exs[0].recalled_slots, 0, "no RECALL")
        self.assertIn((0, "RECALL"), exs[0].router.events)
        self.assertGreater(exs[0].misses, 0)
        self.assertGreater(exs[0].hits, 0)
        # The tenant leaves; the trim lends the KV back, the refill borrows
        # the pool again (the recall's slots) and loads.
        tenant.close()
        for kv in parts:
            kv.trim()
        backed = []
        for ex in exs.values():
            ex.refill()
            backed.append(ex.backed)
        self.assertEqual(backed, [33, 16])
        for ex in exs.values():
            ex.reset_counts()
        with torch.no_grad():
            p, new = prompts[1]
            got = greedy(model, p.to(self.dev), new, self.kv_of(parts), vram_w,
                         before_moe=before_moe)
        self.assertEqual(got[0], ref[1][0])
        for a, b in zip(got[1], ref[1][1]):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual([kv.reserves for kv in parts], [1, 1], "a short prompt reserved")


if __name__ == "__main__":
    unittest.main()
