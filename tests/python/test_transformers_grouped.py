# SPDX-License-Identifier: Apache-2.0
"""The grouped experts path of vram.integrations.experts (what
VramExperts runs for a model on transformers' grouped_mm) against the real
daemon: the routed pairs' groups from the slot table, resident and missed
experts in one layer, the slot table's view made again after an
EXPERT_SHRINK and a RECALL, and its numbers against a reference loop over
groups (transformers' grouped_mm fallback, over plain weights) and against
the per-expert loop (run_experts).

The decoder, the stages and vramd's configuration are
test_transformers_cache.py's (float32, 12 experts of which 2 a token).
Without torch's grouped multiply on the CPU (PyTorch before 2.9) the
grouped path multiplies group by group, as transformers does there; the
slot table, the plans and the mixing of resident and missed experts are
the same code either way. Needs PyTorch and numpy; skipped without them.

    python3 -m unittest discover -s tests/python -p 'test_transformers*.py' -v
"""

from __future__ import annotations

import unittest
from typing import Dict

import vramd_helpers  # noqa: F401  (sets sys.path and $VRAM_LIB for vram)

import vram  # noqa: E402
from test_transformers_cache import (EXPERTS, HIDDEN, STAGES, TOPK, WHY_SKIP,  # noqa: E402
                                     Arrival, Daemon, Tiny, greedy, prompt_of)

if WHY_SKIP is None:
    import torch
    import torch.nn.functional as F
    from vram.integrations.experts import (EventRouter, ExpertStage, plan_groups,
                                           run_experts)
    from vram.integrations.kv import PlainKv, VramKv


def reference(h: "torch.Tensor", idx: "torch.Tensor", wt: "torch.Tensor",
              gate_up: "torch.Tensor", down: "torch.Tensor") -> "torch.Tensor":
    """transformers' grouped_mm experts written out with its fallback (one
    mm per expert over the pairs sorted by expert), over plain weights."""
    tokens, k = idx.shape
    ids = idx.reshape(-1)
    perm = torch.sort(ids, stable=True).indices
    x = h[perm // k]
    y = torch.zeros(ids.numel(), HIDDEN, dtype=h.dtype, device=h.device)
    start = 0
    sorted_ids = ids[perm]
    for e in range(gate_up.shape[0]):
        end = start + int((sorted_ids == e).sum())
        if end > start:
            g, u = torch.mm(x[start:end], gate_up[e].T).chunk(2, dim=-1)
            y[start:end] = torch.mm(F.silu(g) * u, down[e].T)
        start = end
    y = y * wt.reshape(-1)[perm].unsqueeze(-1)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return y[inv].view(tokens, k, HIDDEN).sum(dim=1).to(h.dtype)


def batched_reference(h: "torch.Tensor", idx: "torch.Tensor", wt: "torch.Tensor",
                      gate_up: "torch.Tensor", down: "torch.Tensor") -> "torch.Tensor":
    """transformers' batched_mm experts (what generate decodes with for a
    grouped_mm model) written out, over plain weights: each pair's
    weights gathered, one bmm each way, weighted, summed per token."""
    tokens, k = idx.shape
    ids = idx.reshape(-1)
    x = h.repeat_interleave(k, dim=0)
    g, u = torch.bmm(gate_up[ids], x.unsqueeze(-1)).squeeze(-1).chunk(2, dim=-1)
    y = torch.bmm(down[ids], (F.silu(g) * u).unsqueeze(-1)).squeeze(-1)
    y = y * wt.reshape(-1).unsqueeze(-1)
    return y.view(tokens, k, HIDDEN).sum(dim=1).to(h.dtype)


def routing(model: "Tiny", layer: int, tokens: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(tokens, HIDDEN, generator=g).to(model.device)
    probs = torch.softmax(h @ model.router[layer].T, -1)
    wt, idx = torch.topk(probs, TOPK, dim=-1)
    return h, idx, wt / wt.sum(-1, keepdim=True)


class PlanTest(unittest.TestCase):
    """plan_groups alone (no daemon)."""

    @unittest.skipIf(WHY_SKIP, WHY_SKIP or "")
    def test_rows_windows_and_misses(self) -> None:
        # Experts 0..5; 1 and 4 missed; 0, 2, 3, 5 in slots 7, 3, 20, 4.
        slots = {0: 7, 2: 3, 3: 20, 5: 4}
        ids = torch.tensor([0, 4, 2, 0, 3, 1, 5, 4, 2, 2])
        plan = plan_groups(ids, slots.get, 6, max_groups=8)
        order = plan.perm.tolist()
        # Resident by slot (3: expert 2, 4: 5, 7: 0, then 20: 3), then the
        # missed by expert (1, 4); pair order kept within each.
        self.assertEqual(order, [2, 8, 9, 6, 0, 3, 4, 5, 1, 7])
        self.assertEqual(plan.used, {0: 2, 1: 1, 2: 3, 3: 1, 4: 2, 5: 1})
        # Slots 3..7 in one window (5 groups, 6 and 5 empty), 20 in another.
        self.assertEqual(plan.windows, [(0, 6, 3, [3, 1, 0, 0, 2]), (6, 7, 20, [1])])
        self.assertEqual(plan.missed, (7, 10, [1, 4], [1, 2]))
        wide = plan_groups(ids, slots.get, 6)
        self.assertEqual(wide.windows, [(0, 7, 3, [3, 1, 0, 0, 2] + [0] * 12 + [1])])
        none = plan_groups(ids, lambda e: None, 6)
        self.assertEqual((none.windows, none.missed[2]), ([], [0, 1, 2, 3, 4, 5]))


@unittest.skipIf(WHY_SKIP, WHY_SKIP or "")
class GroupedTest(unittest.TestCase):
    """One vramd per test."""

    def setUp(self) -> None:
        self.daemon = Daemon()
        self.addCleanup(lambda: self.daemon.stop(check=False, keep=self.failed()))
        self.c = vram.Client(self.daemon.sock, name="tf-grouped test")
        self.addCleanup(self.c.close)
        self.dev = "cuda" if self.c.backend == "cuda" else "cpu"

    def failed(self) -> bool:
        r = self._outcome.result
        return any(t is self for t, _ in r.failures + r.errors)

    def stages(self, model: "Tiny") -> Dict[int, "ExpertStage"]:
        router = EventRouter(self.c)
        out = {}
        for s, f, l in STAGES:
            self.c.stage_register(s)
        for s, f, l in STAGES:
            out[s] = ExpertStage(self.c, s, {i: model.experts[i] for i in range(f, l + 1)},
                                 self.dev, router=router)
        for ex in out.values():
            ex.refill(rebalance=False)
        return out

    def check_layer(self, model: "Tiny", ex: "ExpertStage", layer: int, seed: int,
                    tokens: int) -> None:
        h, idx, wt = routing(model, layer, tokens, seed)
        gu, dn = model.plain_experts[layer]
        got = ex.run_grouped(layer, h, idx, wt, F.silu)
        want = reference(h, idx, wt, gu, dn)
        self.assertTrue(torch.equal(got, want),
                        f"layer {layer}, {tokens} tokens: grouped over the slots != the "
                        f"reference loop over groups (max {(got - want).abs().max():.3g})")
        loop = run_experts(h, idx, wt, EXPERTS, F.silu, lambda e, n: (gu[e], dn[e]))
        self.assertTrue(torch.allclose(got, loop, rtol=1e-4, atol=1e-5),
                        f"layer {layer}: grouped and the per-expert loop differ by "
                        f"{(got - loop).abs().max():.3g}")

    def test_resident_missed_and_the_table(self) -> None:
        """Stage 0 has 33 slots for 36 experts: layers 0 and 1 wholly
        resident (the direct path, no routing on the host), layer 2 with 9
        of 12 (the routed path: resident experts over the table, missed
        ones from their host copies). The table is one view over the
        backed slots; an EXPERT_SHRINK drops it, and the next layer makes
        it again over what is backed."""
        model = Tiny(self.dev)
        ex = self.stages(model)[0]
        self.assertEqual((ex.backed, ex.resident), (33, 33))
        self.assertTrue(ex._plan(0)[0] and ex._plan(1)[0])
        self.assertEqual(ex._plan(0)[1:3], (0, EXPERTS))
        self.assertFalse(ex._plan(2)[0], "layer 2 lacks 3 experts")
        for layer in range(3):
            for tokens, seed in ((1, 1), (37, 2)):
                self.check_layer(model, ex, layer, seed + 10 * layer, tokens)
        self.assertEqual((ex.grouped_direct, ex.grouped_routed), (4, 2))
        self.assertGreater(ex.misses, 0)
        hits = ex.hits          # the device-side counts, folded in
        self.assertGreater(hits, 2 * EXPERTS // 2)
        self.assertGreater(sum(n for (l, _), n in ex.uses.items() if l == 0), 0)
        gu, dn = ex._table
        self.assertLessEqual(gu.shape[0], ex.backed)
        # The table shows the slots' own bytes.
        for slot in (0, 17, 32):
            l, e = ex.in_slot[slot]
            self.assertTrue(torch.equal(gu[slot], model.experts[l].gate_up[e]))
            self.assertTrue(torch.equal(dn[slot], model.experts[l].down[e]))
        # Stage 0's reserve takes expert slots into KV: the table goes
        # with them, the layers that lost experts take the routed path.
        self.c.stage_info(0)
        kv = VramKv(self.c, 0, kv_heads=4, head_dim=128, dtype=torch.float32)
        kv.ensure(3000)
        self.assertGreater(ex.shrunk_slots, 0)
        self.assertIsNone(ex._table)
        self.assertLess(ex.backed, 33)
        for layer in range(3):
            self.check_layer(model, ex, layer, 50 + layer, 20)
        self.assertLessEqual(ex._table[0].shape[0], ex.backed)
        kv.trim()
        ex.refill()
        self.assertEqual(ex.backed, 33)
        self.check_layer(model, ex, 1, 77, 5)

    def test_batched_path(self) -> None:
        """run_batched (a wholly resident layer gathered from the slot
        table, as batched_mm gathers from the model's tensor) gives the
        bits of batched_mm over plain weights, counts its rows and hits
        where they belong, and takes run_grouped's routed path for a layer
        with missed experts."""
        model = Tiny(self.dev)
        ex = self.stages(model)[0]
        self.assertTrue(ex._plan(0)[0] and not ex._plan(2)[0])
        for layer, tokens, seed in ((0, 1, 3), (1, 1, 4), (1, 6, 5), (2, 1, 6)):
            h, idx, wt = routing(model, layer, tokens, seed)
            gu, dn = model.plain_experts[layer]
            before = (ex.grouped_direct, ex.grouped_routed, ex.hits, ex.misses)
            uses = {x: ex.uses.get((layer, x), 0) for x in range(EXPERTS)}
            got = ex.run_batched(layer, h, idx, wt, F.silu)
            if layer < 2:
                want = batched_reference(h, idx, wt, gu, dn)
                self.assertTrue(torch.equal(got, want),
                                f"layer {layer}, {tokens} tokens: batched over the slots != "
                                f"batched over plain weights ({(got - want).abs().max():.3g})")
                self.assertEqual((ex.grouped_direct, ex.grouped_routed),
                                 (before[0] + 1, before[1]))
                distinct = len(set(idx.reshape(-1).tolist()))
                self.assertEqual((ex.hits, ex.misses), (before[2] + distinct, before[3]))
            else:  # 3 of layer 2's experts have no slot: the routed path
                want = reference(h, idx, wt, gu, dn)
                self.assertTrue(torch.equal(got, want))
                self.assertEqual(ex.grouped_routed, before[1] + 1)
            for x in idx.reshape(-1).tolist():
                uses[x] += 1
            self.assertEqual({x: ex.uses.get((layer, x), 0) for x in range(EXPERTS)}, uses)
        # Layer 1's slots in expert order: indexed by expert, no map.
        self.assertIsNone(ex._batched[1][2])
        # Layer 0's experts loaded again most used first, here in reverse:
        # slot != expert, so the batched path maps through the device map
        # (and still gives batched_mm's bits); layer 1 follows in order.
        ex.uses.update({(0, x): 1000 + x for x in range(EXPERTS)})
        slots0 = sorted(ex.slot_of[(0, x)] for x in range(EXPERTS))
        for s in slots0:          # emptied, still claimed by layer 0
            del ex.slot_of[ex.in_slot.pop(s)]
        ex.fill()
        self.assertEqual([ex.slot_of[(0, x)] for x in range(EXPERTS)], slots0[::-1])
        for layer, tokens, seed in ((0, 1, 9), (0, 5, 10), (1, 1, 11)):
            h, idx, wt = routing(model, layer, tokens, seed)
            got = ex.run_batched(layer, h, idx, wt, F.silu)
            self.assertTrue(torch.equal(got, batched_reference(h, idx, wt,
                                                               *model.plain_experts[layer])),
                            f"layer {layer}, {tokens} tokens, slots re-ordered")
        self.assertIsNotNone(ex._batched[0][2])
        self.assertIsNone(ex._batched[1][2])

    def test_vram_experts_follow_the_config(self) -> None:
        """VramExperts on the grouped path reads its config's
        _experts_implementation at each call, as transformers' own experts
        do: batched_mm (what generate sets while decoding) takes
        run_batched, grouped_mm run_grouped."""
        try:
            from vram.integrations.transformers import VramExperts
        except ImportError as e:
            self.skipTest(f"transformers not installed ({e})")
        model = Tiny(self.dev)
        ex = self.stages(model)[0]

        class Config:
            _experts_implementation = "grouped_mm"
        cfg = Config()
        m = VramExperts(ex, 0, F.silu, path="grouped", config=cfg)
        h, idx, wt = routing(model, 0, 3, 8)
        d0 = ex.grouped_direct
        m(h, idx, wt)
        self.assertIsNone(ex._dev_counts.get((0, "batched")), "grouped_mm took the batched path")
        cfg._experts_implementation = "batched_mm"   # as generate sets it to decode
        got = m(h, idx, wt)
        self.assertIsNotNone(ex._dev_counts.get((0, "batched")))
        self.assertEqual(ex.grouped_direct, d0 + 2)
        self.assertTrue(torch.equal(got, batched_reference(h, idx, wt,
                                                           *model.plain_experts[0])))

    def test_decode_matches_the_reference(self) -> None:
        """The decoder over vramd with every layer's experts grouped over
        the slot table decodes the tokens and logits (bit for bit) of the
        same decoder over plain memory with the reference loop over
        groups, while its own reserve shrinks its loans and another
        engine's arrival recalls slots mid-decode."""
        model = Tiny(self.dev)
        plain = [PlainKv(capacity_tokens=4096, device=self.dev, stage=s, first_layer=f,
                         nlayers=l - f + 1, kv_heads=4, head_dim=128, dtype=torch.float32,
                         layout="lanes" if s == 0 else "interleaved")
                 for s, f, l in STAGES]

        def kv_of(parts):
            def of(layer):
                for kv in parts:
                    if kv.first_layer <= layer < kv.first_layer + kv.nlayers:
                        return kv, layer - kv.first_layer
                raise AssertionError(layer)
            return of

        ref_moe = lambda layer: (lambda h, idx, wt: reference(
            h, idx, wt, *model.plain_experts[layer]))
        p, new = prompt_of(1, 1500), 10
        with torch.no_grad():
            want = greedy(model, p.to(self.dev), new, kv_of(plain), None, moe_of=ref_moe)
        exs = self.stages(model)
        parts = [VramKv(self.c, s, kv_heads=4, head_dim=128, dtype=torch.float32)
                 for s, _, _ in STAGES]
        of_layer = {l: exs[s] for s, f, last in STAGES for l in range(f, last + 1)}

        def moe(layer):
            def f(h, idx, wt):
                of_layer[layer].poll()
                return of_layer[layer].run_grouped(layer, h, idx, wt, F.silu)
            return f

        tenant = Arrival(self.daemon.sock, exs[0], step=5)
        self.addCleanup(tenant.close)
        with torch.no_grad():
            got = greedy(model, p.to(self.dev), new, kv_of(parts), None, hook=tenant.hook,
                         moe_of=moe)
        self.assertIsNone(tenant.error, tenant.error)
        self.assertEqual(got[0], want[0], "tokens differ from the reference")
        for a, b in zip(got[1], want[1]):
            self.assertTrue(torch.equal(a, b), "logits differ from the reference")
        self.assertGreater(exs[0].shrunk_slots, 0, "no EXPERT_SHRINK")
        self.assertGreater(exs[0].recalled_slots, 0, "no RECALL")
        self.assertGreater(exs[0].misses, 0)
        self.assertGreater(exs[1].grouped_direct + exs[0].grouped_direct, 0)
        self.assertGreater(exs[0].grouped_routed, 0)


if __name__ == "__main__":
    unittest.main()
