# SPDX-License-Identifier: Apache-2.0
"""Expert residency over a vramd stage's expert loans (PyTorch, no
transformers).

Every expert of the stage's layers has a host copy (pinned on cuda, so
that copies from it are asynchronous); the ones that fit live in the
stage's backed expert slots as well, one expert a slot: its fused
``gate_up`` (``2 * intermediate x hidden``) then its ``down`` (``hidden x
intermediate``), in the model's dtype.  :meth:`ExpertStage.weights` gives
an expert's two matrices: the slot's when it is resident (a hit), else the
host copy -- copied into a scratch buffer on the GPU first on cuda -- and
counts the miss.

What moves under it, and what it does:

- **RECALL, EXPERT_SHRINK** (another stage needs pool loans back; the
  stage's own reserve moves own loans into its KV): before the handler
  returns the slots ``[slot_first, slot_end)`` are forgotten -- after a
  ``torch.cuda.synchronize()`` on cuda, since kernels enqueued earlier may
  still read them -- so no later computation uses them; those experts are
  computed from their host copies until they are loaded again.
- **BUDGET_CHANGED** with more backed slots (a trim's surplus became loans,
  a request was granted): the new slots are filled with the most used
  experts that are not resident (:meth:`ExpertStage.fill`), at the next
  :meth:`ExpertStage.poll` or :meth:`ExpertStage.refill`, not inside the
  handler (``docs/engines.md``: load after the call returns).
- Slots are claimed by layer (``expert_claim``: vramd's layer-scoped slot
  ownership), and a claimed slot only ever holds experts of its layer: a
  slot changes layer only after it lost its memory and came back.

Events are delivered inside the client's calls; an engine that decodes for
long stretches without one must dispatch, or a RECALL misses its deadline:
:meth:`ExpertStage.poll` (the experts modules call
:meth:`ExpertStage.poll_between_layers` before each layer: a look at most
every 10 ms)
dispatches what arrived without waiting.  The client's event thread is not
supported: the handler would run while a layer is computing.

:func:`run_experts` computes a mixture-of-experts layer's experts for the
routed tokens in the same order of operations as transformers' eager
experts loop (``Qwen3MoeExperts.forward``), whatever the weights' memory,
so that resident, missed and plain experts give the same numbers.

:meth:`ExpertStage.run_grouped` computes them as transformers'
``grouped_mm`` experts do (one grouped matrix multiply for all experts,
then the routing weights, then a sum over each token's experts), over the
slot table: vramd keeps the slots at ``base + slot * expert_slot_bytes``
and the backed ones are always a prefix, so one strided view over slots
``[0, n)`` (``n`` backed) gives every resident expert's ``gate_up`` and
``down`` without a copy, and a group is a slot. When every expert of the
layer is resident, in at most :data:`MAX_GROUPS` consecutive slots, the
groups come from a device-side map expert -> slot and nothing waits for
the GPU (as transformers' path); otherwise the routing comes to the host
once (as :func:`route`) and the missed experts are copied into a scratch
buffer and multiplied there by the same grouped multiply. The view never
covers a slot that is not backed, and goes with the slots' memory (RECALL,
EXPERT_SHRINK: made again over what is backed when next needed).
"""

from __future__ import annotations

import re
import select
import time
from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

import torch
import torch.nn.functional as F

from ..types import Event, EventType

__all__ = ["EventRouter", "ExpertStage", "HostExperts", "GroupPart", "MAX_GROUPS",
           "grouped_experts", "grouped_mm", "grouped_mm_usable", "plan_groups", "route",
           "run_experts"]

#: Groups of one grouped multiply at most: torch's CUTLASS kernel takes
#: fewer than 1024.
MAX_GROUPS = 1023

#: run_batched's calls a layer whose routed ids are counted together: one
#: index_add_ for that many decode steps instead of one a step (a launch is
#: several microseconds of a decode's host time, which bounds it).
BATCHED_COUNT_EVERY = 32

#: (gate_up, down) of one expert: (2 * intermediate, hidden), (hidden, intermediate).
ExpertWeights = Tuple[torch.Tensor, torch.Tensor]


class HostExperts:
    """One layer's experts in host memory: ``gate_up`` (experts, 2 *
    intermediate, hidden) and ``down`` (experts, hidden, intermediate), as
    transformers' fused experts keep them.  ``pin`` pins them (for
    asynchronous copies to a GPU)."""

    def __init__(self, gate_up: torch.Tensor, down: torch.Tensor,
                 pin: bool = False) -> None:
        if gate_up.dim() != 3 or down.dim() != 3:
            raise ValueError(f"gate_up {tuple(gate_up.shape)}, down "
                             f"{tuple(down.shape)}: expected 3-D (experts, out, in)")
        e, two_i, h = gate_up.shape
        if two_i % 2 or tuple(down.shape) != (e, h, two_i // 2):
            raise ValueError(f"gate_up {tuple(gate_up.shape)} and down "
                             f"{tuple(down.shape)} are not (E, 2I, H) and (E, H, I)")
        if gate_up.dtype != down.dtype:
            raise TypeError(f"gate_up is {gate_up.dtype}, down {down.dtype}")
        self.gate_up, self.down = (self._host(t, pin) for t in (gate_up, down))
        self.num_experts, self.hidden, self.intermediate = e, h, two_i // 2
        self.dtype = gate_up.dtype

    @staticmethod
    def _host(t: torch.Tensor, pin: bool) -> torch.Tensor:
        t = t.detach()
        if not pin:
            return t.to("cpu").contiguous()
        # Straight into pinned memory: no pageable copy on the way (a
        # model's experts are most of its bytes).
        out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        out.copy_(t)
        return out

    @property
    def expert_elements(self) -> int:
        """Elements of one expert (gate_up and down)."""
        return 3 * self.intermediate * self.hidden

    def __getitem__(self, e: int) -> ExpertWeights:
        return self.gate_up[e], self.down[e]


class EventRouter:
    """The client's event handler for the stages this integration holds:
    each event goes to its stage's handler, others to the handler the
    client had before (kept and called as it was)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.handlers: Dict[int, Callable[[Event], None]] = {}
        self.previous = client.on_event
        self.events: List[Tuple[int, str]] = []  # (stage, type name), for reports
        # When pump last looked (time.monotonic): pump_due spaces the looks
        # of a decode's layers.
        self.last_pump = 0.0
        client.on_event = self

    def __call__(self, ev: Event) -> None:
        fn = self.handlers.get(ev.stage)
        if fn is None:
            if self.previous is not None:
                self.previous(ev)
            return
        name = ev.type.name if isinstance(ev.type, EventType) else str(ev.type)
        self.events.append((ev.stage, name))
        fn(ev)

    def pump(self) -> int:
        """Dispatches whatever arrived on the client's connection, without
        waiting; the number of events handled."""
        self.last_pump = time.monotonic()
        try:
            ready, _, _ = select.select([self.client.fileno()], [], [], 0)
        except (OSError, ValueError):
            return 0
        return self.client.dispatch() if ready else 0


class ExpertStage:
    """The experts of one vramd stage's MoE layers: host copies of all,
    the resident ones in the stage's backed expert slots.

    ``layers`` maps each MoE layer (the model's layer index, within the
    stage's layers) to its :class:`HostExperts`; all must have the same
    shapes and dtype.  ``device`` is where computation runs (``cuda``
    on the cuda backend, ``cpu`` on host).  The stage's ``expert_slot``
    must hold one expert (``3 * intermediate * hidden * itemsize`` bytes),
    or ``ValueError`` says so.  ``router`` (one per client) delivers the
    stage's events; made here when not given."""

    def __init__(self, client: Any, stage: int, layers: Dict[int, HostExperts],
                 device: Any, router: Optional[EventRouter] = None) -> None:
        if not layers:
            raise ValueError(f"stage {stage}: no MoE layers given")
        info = client.stage_info(stage)
        first = next(iter(layers.values()))
        for layer, hx in layers.items():
            if not info.first_layer <= layer <= info.last_layer:
                raise ValueError(f"layer {layer} is not one of stage {stage}'s "
                                 f"({info.first_layer}-{info.last_layer})")
            if (hx.num_experts, hx.hidden, hx.intermediate, hx.dtype) != (
                    first.num_experts, first.hidden, first.intermediate, first.dtype):
                raise ValueError(f"layer {layer}'s experts differ in shape or "
                                 "dtype from the stage's others")
        self.itemsize = torch.empty((), dtype=first.dtype).element_size()
        need = first.expert_elements * self.itemsize
        if info.expert_slot_bytes < need:
            raise ValueError(f"stage {stage}'s expert_slot is "
                             f"{info.expert_slot_bytes} bytes; one expert "
                             f"(3 x {first.intermediate} x {first.hidden} "
                             f"{first.dtype}) takes {need}")
        self.client, self.stage = client, stage
        self.layers = dict(layers)
        self.num_experts = first.num_experts
        self.hidden, self.intermediate, self.dtype = first.hidden, first.intermediate, first.dtype
        self.slot_bytes = info.expert_slot_bytes
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.router = router if router is not None else EventRouter(client)
        self.router.handlers[stage] = self.on_event
        # Which expert each slot holds, and back; the slot tensors while
        # backed; the layer that claimed each slot (vramd's R9).
        self.slot_of: Dict[Tuple[int, int], int] = {}
        self.in_slot: Dict[int, Tuple[int, int]] = {}
        self.views: Dict[int, ExpertWeights] = {}
        self.claimed: Dict[int, int] = {}
        self.backed = int(client.expert_residency(stage).expert_slots_backed)
        self.pending_fill = self.backed > 0
        # Tokens routed to each expert (what "most used" means), and the
        # figures of the table: expert computations from a slot and from a
        # host copy, slots lost to recalls and shrinks, experts loaded.
        self.uses: Dict[Tuple[int, int], int] = {}
        self._hits = self.misses = 0
        self.recalled_slots = self.shrunk_slots = self.loads = 0
        self.lost = False
        self._scratch: Optional[torch.Tensor] = None
        # The grouped path (run_grouped): the view over the backed slots
        # [0, _table_slots) while they stay backed; per layer, how its
        # experts lie in the slots (dropped when a slot changes); uses and
        # hits counted on the device where nothing waits for the GPU,
        # added to the host's counts when these are read; how many layer
        # computations went each way.
        self._table: Optional[ExpertWeights] = None
        self._table_slots = 0
        self._plans: Dict[int, Tuple[bool, int, int, Optional[torch.Tensor]]] = {}
        # Per layer and path (direct grouped, batched): (the layer, its
        # groups' experts, rows per group, expert computations per group or
        # None where the host counts them) summed on the device.
        self._dev_counts: Dict[Tuple[int, str], Tuple[int, List[Optional[int]], torch.Tensor,
                                                      Optional[torch.Tensor]]] = {}
        # Ones to count rows with, by length.
        self._ones: Dict[int, torch.Tensor] = {}
        # Per layer on the batched path: its (gate_up, down) tables and the
        # device map expert -> slot (None where slot lo + e holds expert e),
        # and the routed ids not yet counted.
        self._batched: Dict[int, Tuple[torch.Tensor, torch.Tensor,
                                       Optional[torch.Tensor]]] = {}
        self._batched_ids: Dict[int, List[torch.Tensor]] = {}
        self._pending = False
        self.miss_batch = 8          # missed experts a scratch buffer holds
        self.grouped_direct = self.grouped_routed = 0

    # ---- events ----------------------------------------------------------------

    def _forget(self, first: int, end: int) -> int:
        # The slot table may cover these slots: it goes with them (and the
        # counts by slot are taken first, while the slots' experts are known).
        self._fold()
        self._table, self._table_slots = None, 0
        self._plans.clear()
        self._batched.clear()
        n = 0
        for slot in range(first, end):
            key = self.in_slot.pop(slot, None)
            if key is not None:
                del self.slot_of[key]
                n += 1
            self.views.pop(slot, None)
            self.claimed.pop(slot, None)
        return n

    def on_event(self, ev: Event) -> None:
        """The stage's events (see the module documentation)."""
        T = EventType
        if ev.type in (T.RECALL, T.EXPERT_SHRINK):
            if self.cuda:
                # Kernels enqueued before now may still read these slots;
                # the library unmaps them when this returns.
                torch.cuda.synchronize(self.device)
            self._forget(ev.slot_first, ev.slot_end)
            if ev.type == T.RECALL:
                self.recalled_slots += ev.slot_end - ev.slot_first
            else:
                self.shrunk_slots += ev.slot_end - ev.slot_first
            self.backed = min(self.backed, ev.expert_slots_backed)
        elif ev.type == T.BUDGET_CHANGED:
            if ev.expert_slots_backed < self.backed:
                # Slots that went without a RECALL first (cannot happen
                # for loans: vramd always recalls) are forgotten all the same.
                if self.cuda:
                    torch.cuda.synchronize(self.device)
                self._forget(ev.expert_slots_backed, self.backed)
            elif ev.expert_slots_backed > self.backed:
                self.pending_fill = True  # loaded after the call returns
            self.backed = ev.expert_slots_backed
        elif ev.type == T.STAGE_LOST:
            self._forget(0, max(self.in_slot, default=-1) + 1)
            self.backed, self.lost = 0, True

    #: Seconds between two looks at the connection from
    #: :meth:`poll_between_layers`. A look (a select and, when something
    #: came, a dispatch) before every layer measured up to 8% of a decode's
    #: tokens per second in one run on an H200 (a 24-layer model at 30
    #: tokens/s, 1.4 ms a layer, so a 1 ms spacing still looked before
    #: nearly every layer: measured 5% under the same model without looks);
    #: 10 ms is nothing to a RECALL's deadline (seconds), and the recalled
    #: slots stay mapped until it is answered.
    poll_interval_s = 0.01

    def poll(self) -> None:
        """Between layers: dispatches the client's events that arrived (a
        RECALL is answered at once), then loads experts into slots that
        came since (no loans asked for)."""
        self.router.pump()
        if self.pending_fill:
            self.fill()

    def poll_between_layers(self) -> None:
        """:meth:`poll`, looking at the connection only when
        :attr:`poll_interval_s` passed since the router last did (what
        VramExperts calls before each layer)."""
        if time.monotonic() - self.router.last_pump >= self.poll_interval_s:
            self.router.pump()
        if self.pending_fill:
            self.fill()

    # ---- loading ------------------------------------------------------------------

    @property
    def resident(self) -> int:
        """Experts in slots now."""
        return len(self.slot_of)

    @property
    def total_experts(self) -> int:
        return len(self.layers) * self.num_experts

    def request(self) -> int:
        """Asks vramd for loans for the experts that have no slot
        (``expert_request``, at most that many slots' bytes; less, or none,
        is not an error); the slots backed after."""
        want = (self.total_experts - self.backed) * self.slot_bytes
        if want > 0:
            self.backed = int(self.client.expert_request(self.stage, want)
                              .expert_slots_backed)
        return self.backed

    def _slot_views(self, slot: int) -> ExpertWeights:
        flat = self.client.expert_slot_tensor(self.stage, slot, dtype=self.dtype)
        gi, h, i = 2 * self.intermediate, self.hidden, self.intermediate
        return flat[:gi * h].view(gi, h), flat[gi * h:gi * h + h * i].view(h, i)

    def _load(self, slot: int, key: Tuple[int, int]) -> None:
        self._fold()
        self._plans.clear()
        self._batched.clear()
        old = self.in_slot.pop(slot, None)
        if old is not None:
            del self.slot_of[old]
        views = self.views.get(slot)
        if views is None:
            views = self.views[slot] = self._slot_views(slot)
        gu, dn = self.layers[key[0]][key[1]]
        # From pinned memory: asynchronous, ordered before the kernels
        # that read the slot on the same stream.
        views[0].copy_(gu, non_blocking=True)
        views[1].copy_(dn, non_blocking=True)
        self.slot_of[key], self.in_slot[slot] = slot, key
        self.loads += 1

    def _ranked(self, keys: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
        """Most used first; ties in layer and expert order (so the first
        fill, with nothing used yet, is deterministic)."""
        return sorted(keys, key=lambda k: (-self.uses.get(k, 0), k))

    def fill(self, rebalance: bool = False) -> int:
        """Loads the most used non-resident experts into the backed slots
        that hold none, and claims the slots (a claimed slot takes its own
        layer's experts only).  With ``rebalance``, also replaces a
        resident expert by a more used one of its layer.  Returns the
        experts loaded."""
        self.pending_fill = False
        if self.lost:
            return 0
        self._fold()
        before = self.loads
        waiting = self._ranked(k for k in ((l, e) for l in self.layers
                                           for e in range(self.num_experts))
                               if k not in self.slot_of)
        free = [s for s in range(self.backed) if s not in self.in_slot]
        newly: Dict[int, List[int]] = {}
        for slot in free:
            layer = self.claimed.get(slot)
            pick = next((k for k in waiting if layer is None or k[0] == layer), None)
            if pick is None:
                continue
            waiting.remove(pick)
            self._load(slot, pick)
            if layer is None:
                newly.setdefault(pick[0], []).append(slot)
        if rebalance:
            for slot in sorted(self.in_slot):
                key = self.in_slot[slot]
                better = next((k for k in waiting if k[0] == key[0]), None)
                if better is not None and self.uses.get(better, 0) > self.uses.get(key, 0):
                    waiting.remove(better)
                    waiting.append(key)
                    waiting = self._ranked(waiting)
                    self._load(slot, better)
        for layer, slots in newly.items():
            self.client.expert_claim(self.stage, layer, slots)
            for s in slots:
                self.claimed[s] = layer
        return self.loads - before

    def refill(self, rebalance: bool = True) -> int:
        """After a request: asks for loans for the experts without a slot,
        then fills the slots (:meth:`fill`); the experts loaded."""
        if self.lost:
            return 0
        self.request()
        return self.fill(rebalance=rebalance)

    # ---- computing ----------------------------------------------------------------

    def weights(self, layer: int, e: int, tokens: int = 1) -> ExpertWeights:
        """Expert ``e`` of ``layer`` for ``tokens`` routed tokens: its slot's
        matrices when resident, else its host copy (on cuda copied into a
        scratch buffer on the GPU, which the next miss reuses: the copies
        and kernels are ordered on the current stream).  Counts the use
        and the hit or miss."""
        key = (layer, e)
        self.uses[key] = self.uses.get(key, 0) + tokens
        slot = self.slot_of.get(key)
        if slot is not None:
            self._hits += 1
            return self.views[slot]
        self.misses += 1
        gu, dn = self.layers[layer][e]
        if not self.cuda:
            return gu, dn
        sgu, sdn = self._scratch_views(1, [(gu, dn)])
        return sgu[0], sdn[0]

    def _scratch_views(self, n: int, fill: Sequence[ExpertWeights]) -> ExpertWeights:
        """(gate_up (n, 2I, H), down (n, H, I)) over a scratch buffer on the
        device laid out as the slots, holding ``fill`` (copied from the
        host copies, asynchronously: ordered before the kernels that read
        it and after those that read it before, on the current stream)."""
        elems = self.layers[next(iter(self.layers))].expert_elements
        if self._scratch is None or self._scratch.shape[0] < n:
            self._scratch = torch.empty((n, elems), dtype=self.dtype, device=self.device)
        gi, h, i = 2 * self.intermediate, self.hidden, self.intermediate
        gu = self._scratch[:n, :gi * h].view(n, gi, h)
        dn = self._scratch[:n, gi * h:gi * h + h * i].view(n, h, i)
        for j, (g, d) in enumerate(fill):
            gu[j].copy_(g, non_blocking=True)
            dn[j].copy_(d, non_blocking=True)
        return gu, dn

    # ---- the grouped path -----------------------------------------------------------

    def grouped_layout_ok(self) -> bool:
        """Whether the slots can be one strided tensor that torch's grouped
        multiply takes: the slot a whole number of items, the slots, the
        rows and the down matrix starting at multiples of 16 bytes."""
        it = self.itemsize
        return (self.slot_bytes % 16 == 0 and (self.hidden * it) % 16 == 0
                and (self.intermediate * it) % 16 == 0)

    def table(self, need: int) -> ExpertWeights:
        """The slot table: (gate_up (n, 2I, H), down (n, H, I)) over the
        backed slots ``[0, n)``, ``n >= need``, one strided view of the
        expert region (no copy: slot ``j`` is at ``base + j *
        expert_slot_bytes``). Made again after slots went (a view never
        covers memory that is not backed) or when ``need`` passes it."""
        if self._table is not None and self._table_slots >= need:
            return self._table
        n = self.backed
        if need > n:
            raise RuntimeError(f"stage {self.stage}: slot {need - 1} is not backed "
                               f"({n} slots are)")
        info = self.client.stage_info(self.stage)
        region = info.expert_region
        cb = self.client.region_info(region).chunk_bytes
        flat = self.client.lane_tensor(region, 0, 0, -(-n * self.slot_bytes // cb),
                                       dtype=self.dtype)
        se = self.slot_bytes // self.itemsize
        gi, h, i = 2 * self.intermediate, self.hidden, self.intermediate
        base = flat.storage_offset()
        gu = flat.as_strided((n, gi, h), (se, h, 1), base)
        dn = flat.as_strided((n, h, i), (se, i, 1), base + gi * h)
        self._table, self._table_slots = (gu, dn), n
        return self._table

    def _plan(self, layer: int) -> Tuple[bool, int, int, Optional[torch.Tensor]]:
        """(direct, lo, groups, expert -> slot - lo on the device): direct
        when every expert of the layer is resident within ``MAX_GROUPS``
        consecutive slots."""
        p = self._plans.get(layer)
        if p is None:
            slots = [self.slot_of.get((layer, e)) for e in range(self.num_experts)]
            p = (False, 0, 0, None)
            if all(s is not None for s in slots):
                lo, hi = min(slots), max(slots)
                if hi - lo < MAX_GROUPS:
                    rel = torch.tensor([s - lo for s in slots], dtype=torch.int64)
                    p = (True, lo, hi - lo + 1, rel.to(self.device))
            self._plans[layer] = p
        return p

    def _fold(self) -> None:
        """Adds the uses and hits counted on the device to the host's
        (a synchronisation: when the counts are read, and before a slot
        changes)."""
        if not self._pending:
            return
        self._pending = False
        for layer in list(self._batched_ids):
            self._count_batched(layer)
        self._batched_ids.clear()
        for layer, experts, uses, hits in self._dev_counts.values():
            if hits is not None:
                self._hits += int(hits.sum().item())
            for x, n in zip(experts, uses.tolist()):
                if n and x is not None:
                    self.uses[(layer, x)] = self.uses.get((layer, x), 0) + int(n)
        self._dev_counts.clear()

    @property
    def hits(self) -> int:
        """Expert computations from a slot."""
        self._fold()
        return self._hits

    @hits.setter
    def hits(self, value: int) -> None:
        self._fold()
        self._hits = value

    def run_grouped(self, layer: int, hidden_states: torch.Tensor,
                    top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                    act_fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Layer ``layer``'s experts for ``hidden_states`` (tokens, hidden)
        routed to ``top_k_index`` with ``top_k_weights``, as transformers'
        ``grouped_mm`` experts compute them (:func:`grouped_experts`), over
        the slot table. Every expert of the layer resident (in at most
        ``MAX_GROUPS`` consecutive slots): one grouped multiply over the
        table, its groups from the device-side map expert -> slot, nothing
        waiting for the GPU; uses and hits are counted on the device.
        Else the routing comes to the host once (:func:`plan_groups`):
        the resident experts are multiplied over the table, the missed
        ones copied into a scratch buffer (``miss_batch`` at a time; on the
        CPU their host copies are used as they are) and multiplied there."""
        direct, lo, groups, rel_map = self._plan(layer)
        e = self.num_experts
        if direct:
            self.grouped_direct += 1
            ids = top_k_index.reshape(-1)
            gu, dn = self.table(lo + groups)
            rel = rel_map[ids]
            rel_sorted, perm = torch.sort(rel, stable=True)
            # As transformers counts: histc, no synchronisation (a float
            # input on the CPU, an integer one on a GPU).
            hist_in = rel_sorted.float() if rel.device.type == "cpu" else rel_sorted.int()
            counts = torch.histc(hist_in, bins=groups, min=0, max=groups - 1)
            offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
            acc = self._dev_counts.get((layer, "grouped"))
            if acc is None:
                of = [self.in_slot.get(lo + g) for g in range(groups)]
                acc = self._dev_counts[(layer, "grouped")] = (
                    layer, [k[1] if k is not None and k[0] == layer else None for k in of],
                    torch.zeros_like(counts), torch.zeros_like(counts))
            acc[2].add_(counts)
            acc[3].add_(counts.clamp(max=1))
            self._pending = True
            part = GroupPart(0, ids.numel(), gu[lo:lo + groups], dn[lo:lo + groups], offs)
            return grouped_experts(hidden_states, top_k_weights, perm, [part], act_fn)
        self.grouped_routed += 1
        with torch.no_grad():
            ids = top_k_index.detach().reshape(-1).to("cpu")   # the one synchronisation
        plan = plan_groups(ids, lambda x: self.slot_of.get((layer, x)), e)
        for x, n in plan.used.items():
            self.uses[(layer, x)] = self.uses.get((layer, x), 0) + n
        nmiss = len(plan.missed[2]) if plan.missed else 0
        self._hits += len(plan.used) - nmiss
        self.misses += nmiss
        if self.cuda and plan.missed:
            # Some routed experts have no slot. Multiplying the slots and
            # the misses in parts gives other bits than transformers' one
            # call over all the layer's experts (the kernel a grouped
            # multiply takes depends on its groups and rows: measured, a
            # seed-shaped run's tokens differed), so the layer's routed
            # experts are put where the model's own tensor would hold
            # them, in a scratch buffer laid out as that tensor (resident
            # ones from their slots, device to device; missed ones from
            # their pinned host copies), and multiplied in one call of the
            # same shape as the model's. Experts not routed to are not
            # copied: their groups have no rows, and are not read.
            sgu, sdn = self._scratch_views(e, ())
            for x in plan.used:
                s = self.slot_of.get((layer, x))
                g, d = (self.views.get(s) or self._slot_views(s)) if s is not None \
                    else self.layers[layer][x]
                sgu[x].copy_(g, non_blocking=True)
                sdn[x].copy_(d, non_blocking=True)
            ids_dev = top_k_index.reshape(-1)
            ids_sorted, perm = torch.sort(ids_dev, stable=True)
            counts = torch.histc(ids_sorted.int(), bins=e, min=0, max=e - 1)
            offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
            part = GroupPart(0, ids_dev.numel(), sgu, sdn, offs)
            return grouped_experts(hidden_states, top_k_weights, perm, [part], act_fn)
        # The missed experts in batches (one part each), their offsets
        # with the windows', to the device in one copy.
        batches: List[Tuple[int, int, List[int], List[int]]] = []
        if plan.missed:
            first, _, experts, counts_m = plan.missed
            step = len(experts) if not self.cuda else max(1, self.miss_batch)
            for j in range(0, len(experts), step):
                cnt = counts_m[j:j + step]
                batches.append((first, first + sum(cnt), experts[j:j + step], cnt))
                first += sum(cnt)
        offs_host: List[int] = []
        for _, _, _, cnt in plan.windows:
            offs_host.extend(torch.tensor(cnt).cumsum(0).tolist())
        for _, _, experts, cnt in batches:
            if self.cuda:
                offs_host.extend(torch.tensor(cnt).cumsum(0).tolist())
            else:  # groups = every expert of the host copy
                full = [0] * e
                for x, n in zip(experts, cnt):
                    full[x] = n
                offs_host.extend(torch.tensor(full).cumsum(0).tolist())
        both = torch.cat([plan.perm, torch.tensor(offs_host, dtype=torch.int64)])
        if top_k_index.device.type != "cpu":
            both = both.to(top_k_index.device)
        perm, offs_all = both[:ids.numel()], both[ids.numel():].to(torch.int32)
        return grouped_experts(hidden_states, top_k_weights, perm,
                               self._routed_parts(layer, plan.windows, batches, offs_all),
                               act_fn)

    def run_batched(self, layer: int, hidden_states: torch.Tensor,
                    top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                    act_fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Layer ``layer``'s experts as transformers' ``batched_mm``
        experts compute them -- what ``generate`` switches a ``grouped_mm``
        model to while decoding: every routed (token, expert) pair's
        weights gathered (here from the slot table: indexed by expert where
        slot ``lo + e`` holds expert ``e``, else through a device-side map
        expert -> slot) and multiplied by one batched ``bmm``, times the
        routing weight, summed over each token's experts. Nothing waits for
        the GPU; rows are counted on the device (hits on the host when each
        token's k experts are distinct: one token). With a layer's expert
        missing it computes as :meth:`run_grouped` does."""
        t = self._batched.get(layer)
        if t is None:
            direct, lo, groups, _ = self._plan(layer)
            if not direct:
                return self.run_grouped(layer, hidden_states, top_k_index, top_k_weights,
                                        act_fn)
            t = self._batched_tables(layer, lo, groups, hidden_states.device)
        gu, dn, slot_map = t
        tokens, hidden = hidden_states.shape
        k = top_k_index.shape[-1]
        ids = top_k_index.reshape(-1)
        # Slot lo + e holding expert e: the table from lo indexed by expert;
        # else through the device map.
        ids_slot = ids if slot_map is None else slot_map[ids]
        # A decode step's one token: its k copies as one contiguous copy
        # (what batched_mm's gather gives; repeat_interleave launches more).
        x = (hidden_states.expand(k, hidden).contiguous() if tokens == 1
             else hidden_states.repeat_interleave(k, dim=0))
        y = torch.bmm(gu[ids_slot], x.unsqueeze(-1)).squeeze(-1)
        gate, up = y.chunk(2, dim=-1)
        y = act_fn(gate) * up
        y = torch.bmm(dn[ids_slot], y.unsqueeze(-1)).squeeze(-1)
        y = y * top_k_weights.reshape(-1).unsqueeze(-1)
        out = y.view(tokens, k, hidden).sum(dim=1).to(hidden_states.dtype)
        self.grouped_direct += 1
        # Uses: the routed ids are kept (a reference, no kernel) and counted
        # on the device BATCHED_COUNT_EVERY calls at a time.
        pend = self._batched_ids.get(layer)
        if pend is None:
            pend = self._batched_ids[layer] = []
            if (layer, "batched") not in self._dev_counts:
                self._dev_counts[(layer, "batched")] = (
                    layer, list(range(self.num_experts)),
                    torch.zeros(self.num_experts, dtype=torch.int64, device=ids.device), None)
        pend.append(ids)
        if len(pend) >= BATCHED_COUNT_EVERY:
            self._count_batched(layer)
        if tokens == 1:
            self._hits += k   # top-k experts are distinct
        else:
            seen = torch.zeros(self.num_experts, dtype=torch.int64, device=ids.device)
            self._hits += int(seen.index_fill_(0, ids, 1).sum().item())
        self._pending = True
        return out

    def _batched_tables(self, layer: int, lo: int, groups: int, device: torch.device
                        ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """The batched path's tables for wholly resident ``layer``, kept
        in ``_batched`` until a slot changes: the slot table's
        ``num_experts`` slots from ``lo`` and no map when slot ``lo + e``
        holds expert ``e`` (indexed by expert, as batched_mm indexes the
        model's tensor), else the whole table and a device map expert ->
        slot."""
        gu, dn = self.table(lo + groups)
        slots = [self.slot_of[(layer, x)] for x in range(self.num_experts)]
        if slots == list(range(lo, lo + self.num_experts)):
            t = (gu[lo:lo + self.num_experts], dn[lo:lo + self.num_experts], None)
        else:
            t = (gu, dn, torch.tensor(slots, dtype=torch.int64).to(device))
        self._batched[layer] = t
        return t

    def _count_batched(self, layer: int) -> None:
        """Adds the routed ids kept by run_batched for ``layer`` to its
        device counts (no synchronisation)."""
        pend = self._batched_ids.get(layer)
        if not pend:
            return
        ids = pend[0] if len(pend) == 1 else torch.cat(pend)
        pend.clear()
        n = ids.numel()
        ones = self._ones.get(n)
        if ones is None:
            ones = self._ones[n] = torch.ones(n, dtype=torch.int64, device=ids.device)
        self._dev_counts[(layer, "batched")][2].index_add_(0, ids, ones)

    def _routed_parts(self, layer: int, windows: List[Tuple[int, int, int, List[int]]],
                      batches: List[Tuple[int, int, List[int], List[int]]],
                      offs_all: torch.Tensor) -> Iterator[GroupPart]:
        """The parts of a routed layer, in row order: the windows over the
        slot table, then the missed batches. A generator: a batch's experts
        are copied into the scratch buffer only when its turn comes, after
        the previous batch's multiplies were enqueued (one stream), so the
        batches can share the buffer."""
        at = 0
        if windows:
            gu, dn = self.table(max(lo + len(cnt) for _, _, lo, cnt in windows))
            for first, end, lo, cnt in windows:
                g = len(cnt)
                yield GroupPart(first, end, gu[lo:lo + g], dn[lo:lo + g], offs_all[at:at + g])
                at += g
        hx = self.layers[layer]
        for first, end, experts, _ in batches:
            if self.cuda:
                g = len(experts)
                gu, dn = self._scratch_views(g, [hx[x] for x in experts])
            else:  # the host copies themselves, every expert a group
                g = hx.num_experts
                gu, dn = hx.gate_up, hx.down
            yield GroupPart(first, end, gu, dn, offs_all[at:at + g])
            at += g

    def stats(self) -> Dict[str, int]:
        """Figures for a table."""
        res = self.client.expert_residency(self.stage)
        return {"expert_loaned_bytes": int(res.expert_loaned_bytes),
                "slots_backed": int(res.expert_slots_backed),
                "resident": self.resident, "experts": self.total_experts,
                "hits": self.hits, "misses": self.misses, "loads": self.loads,
                "recalled_slots": self.recalled_slots,
                "shrunk_slots": self.shrunk_slots,
                "grouped_direct": self.grouped_direct,
                "grouped_routed": self.grouped_routed}

    def reset_counts(self) -> None:
        """Zeroes hits, misses, loads, lost slots and the grouped path's
        layer counts (not the uses)."""
        self.hits = self.misses = self.loads = 0
        self.recalled_slots = self.shrunk_slots = 0
        self.grouped_direct = self.grouped_routed = 0


def route(top_k_index: torch.Tensor, num_experts: int
          ) -> List[Tuple[int, int, torch.Tensor, torch.Tensor]]:
    """The experts a layer's tokens are routed to, ascending: ``(expert,
    count, token_idx, top_k_pos)`` for each expert hit, with the indices
    transformers' eager experts loop takes from ``torch.where`` over the
    one-hot mask (``mask[e]`` is (k, tokens): by position, then token) --
    the same values in the same order -- from one copy of the routing to
    the host and one copy of the indices back, where that loop waits for
    the GPU once per expert (a ``nonzero``)."""
    tokens, k = top_k_index.shape
    with torch.no_grad():
        idx = top_k_index.detach().to("cpu")            # the one synchronisation
        flat = idx.t().reshape(-1)                       # (position, token) order
        order = torch.sort(flat, stable=True).indices     # grouped by expert, order kept
        counts = torch.bincount(flat, minlength=num_experts).tolist()
        both = torch.stack([order % tokens, torch.div(order, tokens, rounding_mode="floor")])
        if top_k_index.device.type != "cpu":
            both = both.to(top_k_index.device)
    out = []
    start = 0
    for e, n in enumerate(counts):
        if n:
            out.append((e, n, both[0, start:start + n], both[1, start:start + n]))
            start += n
    return out


def run_experts(hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor, num_experts: int,
                act_fn: Callable[[torch.Tensor], torch.Tensor],
                weights: Callable[[int, int], ExpertWeights]) -> torch.Tensor:
    """A MoE layer's experts: ``hidden_states`` (tokens, hidden), each token
    routed to ``top_k_index`` (tokens, k) with ``top_k_weights``;
    ``weights(e, tokens)`` gives expert ``e``'s ``(gate_up, down)``.

    Per expert hit, in ascending expert order, the same operations as
    transformers' eager experts loop: the tokens routed to it, ``linear``
    with ``gate_up`` split into gate and up, ``act_fn(gate) * up``,
    ``linear`` with ``down``, times the routing weight, added into the
    output in the output's dtype.  Same inputs and weights, same bits;
    the routing comes to the host once a layer (:func:`route`)."""
    out = torch.zeros_like(hidden_states)
    for e, n, token_idx, top_k_pos in route(top_k_index, num_experts):
        gate_up, down = weights(e, n)
        current = hidden_states[token_idx]
        gate, up = F.linear(current, gate_up).chunk(2, dim=-1)
        current = act_fn(gate) * up
        current = F.linear(current, down)
        current = current * top_k_weights[token_idx, top_k_pos, None]
        out.index_add_(0, token_idx, current.to(out.dtype))
    return out


# ---- the grouped path ------------------------------------------------------------

def _torch_version() -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _grouped_op() -> Optional[Callable[..., torch.Tensor]]:
    """torch's grouped multiply: ``torch.nn.functional.grouped_mm`` where
    there is one, else ``torch._grouped_mm`` (PyTorch 2.8 and later)."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


_USABLE: Dict[Any, bool] = {}


def grouped_mm_usable(device: Any) -> bool:
    """Whether torch's own grouped multiply runs on ``device``, by the test
    transformers' ``grouped_mm`` experts make before using it (else they,
    and :func:`grouped_mm`, multiply group by group): on cuda a device of
    compute capability 8.0 or more (9.0 with ``torch._grouped_mm`` before
    PyTorch 2.9); on the CPU PyTorch 2.9 or later."""
    device = torch.device(device)
    got = _USABLE.get(device)
    if got is None:
        got = _USABLE[device] = _grouped_usable(device)
    return got


def _grouped_usable(device: torch.device) -> bool:
    if _grouped_op() is None:
        return False
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        cap = torch.cuda.get_device_capability(device)
        if hasattr(F, "grouped_mm") or _torch_version() >= (2, 9):
            return cap >= (8, 0)
        return cap >= (9, 0)
    if device.type == "cpu":
        return _torch_version() >= (2, 9)
    return True


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``a`` (rows, K) sorted by group, ``b`` (groups, K, N), ``offs``
    (groups,) int32, the cumulative rows of the groups: row ``r`` of the
    result is ``a[r] @ b[g]`` for the group ``g`` that holds ``r``. torch's
    grouped multiply where :func:`grouped_mm_usable`, else one ``mm`` per
    group that has rows (``offs`` read on the host) -- as transformers'
    ``grouped_mm`` experts and their fallback do, so the same numbers come
    out."""
    if grouped_mm_usable(b.device):
        return _grouped_op()(a.to(b.dtype), b, offs=offs)
    out = torch.zeros(a.shape[0], b.shape[2], device=a.device, dtype=a.dtype)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            torch.mm(a[start:end], b[g], out=out[start:end])
        start = end
    return out


class GroupPart(NamedTuple):
    """Rows ``[first, end)`` of a layer's routed (token, expert) pairs,
    sorted, multiplied by the experts ``gate_up`` (groups, 2 x
    intermediate, hidden) and ``down`` (groups, hidden, intermediate):
    ``offs`` (groups,) int32 on the device, cumulative from ``first``."""
    first: int
    end: int
    gate_up: torch.Tensor
    down: torch.Tensor
    offs: torch.Tensor


def grouped_experts(hidden_states: torch.Tensor, top_k_weights: torch.Tensor,
                    perm: torch.Tensor, parts: Iterable[GroupPart],
                    act_fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A MoE layer's experts as transformers' ``grouped_mm`` experts compute
    them: ``perm`` (tokens x k,) orders the routed pairs (pair ``p`` is
    token ``p // k``'s ``p % k``-th expert) so that each part's rows are
    its groups' in turn (``parts`` in row order, covering every row; each
    is multiplied before the next is taken); per part, :func:`grouped_mm` with ``gate_up``
    transposed, ``act_fn(gate) * up``, :func:`grouped_mm` with ``down``
    transposed; then times the routing weight, back in pair order, summed
    over each token's k experts (in float32 for bf16, by ``sum``) and cast
    to the input's dtype. A row's numbers do not depend on the group it is
    in or the rows beside it, so experts in slots, in a scratch buffer or
    in the model's own tensor give the same result."""
    tokens, hidden = hidden_states.shape
    k = top_k_weights.shape[-1]
    x = hidden_states[torch.div(perm, k, rounding_mode="floor")]
    w = top_k_weights.reshape(-1)[perm]
    outs = []
    for part in parts:
        y = grouped_mm(x[part.first:part.end], part.gate_up.transpose(-2, -1), part.offs)
        gate, up = y.chunk(2, dim=-1)
        y = act_fn(gate) * up
        outs.append(grouped_mm(y, part.down.transpose(-2, -1), part.offs))
    y = outs[0] if len(outs) == 1 else torch.cat(outs)
    y = y * w.unsqueeze(-1)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    y = y[inv]
    return y.view(tokens, k, hidden).sum(dim=1).to(hidden_states.dtype)


class GroupPlan(NamedTuple):
    """How a layer's routed pairs are multiplied (:func:`plan_groups`):
    ``perm`` the pairs in row order; ``windows`` ``(first, end, lo,
    counts)`` per window of resident experts' slots ``lo .. lo +
    len(counts) - 1`` (``counts`` the rows of each slot, zero for slots
    not routed to); ``missed`` ``(first, end, experts, counts)`` for the
    experts without a slot, in expert order; ``used`` the rows of each
    expert routed to."""
    perm: torch.Tensor
    windows: List[Tuple[int, int, int, List[int]]]
    missed: Optional[Tuple[int, int, List[int], List[int]]]
    used: Dict[int, int]


def plan_groups(expert_ids: torch.Tensor, slot_of: Callable[[int], Optional[int]],
                num_experts: int, max_groups: int = MAX_GROUPS) -> GroupPlan:
    """The rows of a layer's routed pairs, on the host: ``expert_ids``
    (pairs,) on the CPU; ``slot_of(e)`` expert ``e``'s slot or None.
    Resident pairs first, by slot (stably: pair order within a slot),
    split into windows of at most ``max_groups`` consecutive slots; then
    the missed pairs, by expert."""
    counts = torch.bincount(expert_ids, minlength=num_experts).tolist()
    used = {e: n for e, n in enumerate(counts) if n}
    slots = {e: slot_of(e) for e in used}
    resident = sorted((s, e) for e, s in slots.items() if s is not None)
    missed = [e for e in sorted(used) if slots[e] is None]
    top = max((s for s, _ in resident), default=-1) + 1
    key = torch.empty(num_experts, dtype=torch.int64)
    for e in range(num_experts):
        s = slots.get(e)
        key[e] = s if s is not None else top + e
    perm = torch.sort(key[expert_ids], stable=True).indices
    windows: List[Tuple[int, int, int, List[int]]] = []
    row = 0
    i = 0
    while i < len(resident):
        lo = resident[i][0]
        j = i
        while j < len(resident) and resident[j][0] - lo < max_groups:
            j += 1
        hi = resident[j - 1][0]
        cnt = [0] * (hi - lo + 1)
        for s, e in resident[i:j]:
            cnt[s - lo] = used[e]
        n = sum(cnt)
        windows.append((row, row + n, lo, cnt))
        row += n
        i = j
    miss = None
    if missed:
        n = sum(used[e] for e in missed)
        miss = (row, row + n, missed, [used[e] for e in missed])
    return GroupPlan(perm, windows, miss, used)
