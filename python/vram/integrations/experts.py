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
:meth:`ExpertStage.poll` (the experts modules call it before each layer)
dispatches what arrived without waiting.  The client's event thread is not
supported: the handler would run while a layer is computing.

:func:`run_experts` computes a mixture-of-experts layer's experts for the
routed tokens in the same order of operations as transformers' eager
experts loop (``Qwen3MoeExperts.forward``), whatever the weights' memory,
so that resident, missed and plain experts give the same numbers.
"""

from __future__ import annotations

import select
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..types import Event, EventType

__all__ = ["EventRouter", "ExpertStage", "HostExperts", "route", "run_experts"]

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
        self.hits = self.misses = 0
        self.recalled_slots = self.shrunk_slots = self.loads = 0
        self.lost = False
        self._scratch: Optional[torch.Tensor] = None

    # ---- events ----------------------------------------------------------------

    def _forget(self, first: int, end: int) -> int:
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

    def poll(self) -> None:
        """Between layers: dispatches the client's events that arrived (a
        RECALL is answered at once), then loads experts into slots that
        came since (no loans asked for)."""
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
            self.hits += 1
            return self.views[slot]
        self.misses += 1
        gu, dn = self.layers[layer][e]
        if not self.cuda:
            return gu, dn
        if self._scratch is None:
            self._scratch = torch.empty(
                self.layers[layer].expert_elements, dtype=self.dtype, device=self.device)
        gi, h, i = 2 * self.intermediate, self.hidden, self.intermediate
        sgu = self._scratch[:gi * h].view(gi, h)
        sdn = self._scratch[gi * h:gi * h + h * i].view(h, i)
        sgu.copy_(gu, non_blocking=True)
        sdn.copy_(dn, non_blocking=True)
        return sgu, sdn

    def stats(self) -> Dict[str, int]:
        """Figures for a table."""
        res = self.client.expert_residency(self.stage)
        return {"expert_loaned_bytes": int(res.expert_loaned_bytes),
                "slots_backed": int(res.expert_slots_backed),
                "resident": self.resident, "experts": self.total_experts,
                "hits": self.hits, "misses": self.misses, "loads": self.loads,
                "recalled_slots": self.recalled_slots,
                "shrunk_slots": self.shrunk_slots}

    def reset_counts(self) -> None:
        """Zeroes hits, misses, loads and lost slots (not the uses)."""
        self.hits = self.misses = self.loads = 0
        self.recalled_slots = self.shrunk_slots = 0


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
