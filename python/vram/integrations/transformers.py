# SPDX-License-Identifier: Apache-2.0
"""vramd under a transformers 5.x model: :class:`VramCache`, a ``Cache``
whose K and V live in vramd stages' KV regions, and :func:`install`, which
also puts a mixture-of-experts model's experts on vramd's expert loans.

::

    import vram
    from vram.integrations import transformers as vt

    client = vram.Client(name="hf-engine")
    cache = vt.install(model, client, stages=[0, 1])    # layers 0-31, 32-47
    with cache.request(prompt_tokens=ids.shape[1], max_new_tokens=256):
        out = model.generate(ids, past_key_values=cache, max_new_tokens=256,
                             do_sample=False)
    print(cache.stats())

What it does:

- Each stage given is one of vramd's configured stages (registered here
  when this client has not yet): its ``first_layer``..``last_layer`` are
  the model's layers it holds, and together the stages must cover every
  layer once.  Each layer's K and V are views over its stage's KV lanes
  (:mod:`vram.integrations.kv`: the layout, the window).  ``update``
  writes the new tokens in place and returns ``(1, kv_heads, L,
  head_dim)`` views of the first ``L``; nothing is concatenated or copied.
  A write past the mapped window reserves first; :meth:`VramCache.request`
  (or :meth:`VramCache.begin_request`) maps the whole output budget before
  decode, and its end (:meth:`VramCache.end_request`) trims: the surplus
  becomes the stage's expert loans, filled with the most used experts.
- :func:`install` replaces each fused experts module (Qwen3-MoE's
  ``Qwen3MoeExperts``: ``gate_up_proj`` (experts, 2 * intermediate,
  hidden), ``down_proj`` (experts, hidden, intermediate)) by a
  :class:`VramExperts`: the weights move to host memory (pinned on cuda),
  the resident experts live in the stage's expert slots
  (:mod:`vram.integrations.experts`), the others are computed from the
  host copies and counted as misses.  Routing is the model's own (the
  router is not touched), and the experts are computed as the model's
  ``experts_implementation`` computes them (``experts_path``): a model on
  transformers' ``grouped_mm`` (the default on a GPU) gets the grouped
  path, one grouped multiply over vramd's slot table
  (:meth:`~vram.integrations.experts.ExpertStage.run_grouped`); an
  ``eager`` one the per-expert loop in the eager loop's order
  (:func:`~vram.integrations.experts.run_experts`). Either way the model
  decodes the same tokens as before.

What it does not do: batches of more than one sequence (``ValueError``),
beam search, offloading, ``torch.compile`` (``is_compileable`` is False:
the window grows on the host side; a CUDA graph captured by hand over
:meth:`VramCache.set_static`'s fixed-shape window is what replays); models whose experts are not fused
3-D parameters, have biases or are stored transposed
(``NotImplementedError``); the event thread (events are dispatched at each
experts layer and by :meth:`VramCache.poll`).  Sliding-window layers are
cached whole (every token kept, the mask does the rest).
"""

from __future__ import annotations

import contextlib
import errno as _errno
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

try:
    from transformers.cache_utils import Cache, CacheLayerMixin
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("vram.integrations.transformers needs transformers 5.x "
                      "(pip install 'transformers>=5'); vram.integrations.kv and "
                      ".experts work without it") from e

from ..errors import VramError
from .experts import EventRouter, ExpertStage, HostExperts, grouped_mm_usable, run_experts
from .kv import LaneKv, PlainKv, VramKv

__all__ = ["VramCache", "VramExperts", "VramLayer", "install", "plain_cache",
           "find_experts", "model_dims", "experts_path_for", "set_experts_path",
           "sdpa_backends"]

#: VramExperts' ways of computing: "grouped" (transformers' grouped_mm
#: numbers, one grouped multiply over the slot table), "loop" (the eager
#: loop's, expert by expert).
EXPERTS_PATHS = ("grouped", "loop")


def _query_length(q: Any) -> int:
    """get_mask_sizes' argument: the query length (5.x), or a
    cache_position tensor (older 5.x and 4.x)."""
    return int(q.shape[0]) if isinstance(q, torch.Tensor) else int(q)


class VramLayer(CacheLayerMixin):
    """One attention layer of a :class:`VramCache`: local layer ``local``
    of ``kv`` (a :class:`~vram.integrations.kv.LaneKv`)."""

    is_compileable = False
    is_sliding = False
    is_croppable = True

    def __init__(self, kv: LaneKv, local: int) -> None:
        super().__init__()
        self.kv, self.local = kv, local

    def __repr__(self) -> str:
        return (f"VramLayer(stage {self.kv.stage}, layer "
                f"{self.kv.first_layer + self.local}, {self.get_seq_length()} tokens)")

    def lazy_initialization(self, key_states: torch.Tensor,
                            value_states: Optional[torch.Tensor] = None) -> None:
        # The memory is the stage's, laid out already: only check that the
        # model's states fit it.
        b, h, _, d = key_states.shape
        if (h, d) != (self.kv.kv_heads, self.kv.head_dim) or key_states.dtype != self.kv.dtype:
            raise ValueError(f"layer {self.kv.first_layer + self.local}: states of "
                             f"{h} heads x {d} {key_states.dtype}; the cache holds "
                             f"{self.kv.kv_heads} x {self.kv.head_dim} {self.kv.dtype}")
        if b != 1:
            raise ValueError(f"batch {b}: VramCache holds one sequence (batch 1)")
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
               *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.kv.static is not None:
            # The fixed-shape window (VramCache.set_static): the same views
            # every step, written at the caller's position tensor.
            self.keys, self.values = self.kv.write_at(self.local, key_states, value_states)
        else:
            self.keys, self.values = self.kv.append(self.local, key_states, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: Any) -> Tuple[int, int]:
        if self.kv.static is not None:
            return self.kv.static_tokens, 0
        return self.get_seq_length() + _query_length(query_length), 0

    def get_seq_length(self) -> int:
        return self.kv.lengths[self.local]

    def get_max_length(self) -> int:
        # As DynamicLayer: no static size (masks come from get_mask_sizes);
        # the native context is vramd's to enforce (E2BIG).
        return -1

    def get_max_cache_shape(self) -> int:  # the name before 5.16
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        self.kv.crop(tokens_to_remove, self.local)

    def reset(self) -> None:
        self.kv.reset(self.local)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if beam_idx.numel() == 1 and int(beam_idx.reshape(-1)[0]) == 0:
            return
        raise NotImplementedError("VramCache holds one sequence: no beam search")

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            raise NotImplementedError("VramCache holds one sequence (batch 1)")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if indices.numel() != 1 or int(indices.reshape(-1)[0]) != 0:
            raise NotImplementedError("VramCache holds one sequence (batch 1)")

    def offload(self) -> None:
        raise NotImplementedError("VramCache's KV is vramd's memory: to give it "
                                  "back while idle, sleep the stage (docs/engines.md)")

    def prefetch(self) -> None:
        raise NotImplementedError("VramCache's KV is vramd's memory: it is not offloaded")


class VramCache(Cache):
    """A transformers ``Cache`` over per-stage KV (``parts``, one
    :class:`~vram.integrations.kv.LaneKv` a stage, together covering
    layers ``0..num_layers-1`` once); ``experts`` the stages'
    :class:`~vram.integrations.experts.ExpertStage`, when :func:`install`
    put the experts on loans.  Made by :func:`install` (vramd) or
    :func:`plain_cache` (ordinary memory, the reference)."""

    def __init__(self, parts: Sequence[LaneKv], num_layers: int,
                 experts: Optional[Dict[int, ExpertStage]] = None,
                 router: Optional[EventRouter] = None) -> None:
        layers: List[Optional[VramLayer]] = [None] * num_layers
        for kv in parts:
            for i in range(kv.nlayers):
                layer = kv.first_layer + i
                if not 0 <= layer < num_layers:
                    raise ValueError(f"stage {kv.stage} holds layer {layer}; the "
                                     f"model has layers 0-{num_layers - 1}")
                if layers[layer] is not None:
                    raise ValueError(f"layer {layer} is in stage {kv.stage} and "
                                     f"stage {layers[layer].kv.stage}")
                layers[layer] = VramLayer(kv, i)
        missing = [i for i, l in enumerate(layers) if l is None]
        if missing:
            raise ValueError(f"no stage holds layers {missing} (the stages' "
                             "first_layer..last_layer must cover the model's)")
        super().__init__(layers=layers)
        self.parts = list(parts)
        self.experts = dict(experts or {})
        self.router = router

    def stage_of(self, layer_idx: int) -> int:
        """The vramd stage that holds layer ``layer_idx``."""
        return self.layers[layer_idx].kv.stage

    def begin_request(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Before ``generate``: maps every stage's KV for the prompt and
        every output token (the output budget), so that decode never
        allocates. VramError E2BIG past a stage's native context."""
        if self.get_seq_length() != 0:
            raise RuntimeError(f"the cache holds {self.get_seq_length()} tokens: "
                               "end_request() first")
        for kv in self.parts:
            kv.ensure(prompt_tokens + max_new_tokens)
        self.poll()

    def end_request(self, keep_tokens: int = 0, refill: bool = True) -> None:
        """After a request: forgets the tokens (past ``keep_tokens``), trims
        every stage's KV back to its initial window (the surplus becomes
        its expert loans), then asks for loans for experts without a slot
        and loads the most used into the slots (``refill``)."""
        for kv in self.parts:
            kv.trim(keep_tokens)
        if refill:
            for ex in self.experts.values():
                ex.refill()

    @contextlib.contextmanager
    def request(self, prompt_tokens: int, max_new_tokens: int) -> Iterator["VramCache"]:
        """``begin_request`` on entry, ``end_request`` on exit (an error
        inside too: the KV is given back either way)."""
        self.begin_request(prompt_tokens, max_new_tokens)
        try:
            yield self
        finally:
            self.end_request()

    def set_static(self, tokens: int, index: torch.Tensor) -> None:
        """A fixed-shape window for CUDA graphs: maps ``tokens`` tokens of
        every stage's KV and from now on every layer's ``update`` writes
        its new token at ``index`` (a 1-element int64 tensor on the model's
        device, which the caller sets before each step) and returns ``(1,
        kv_heads, tokens, head_dim)`` views of the first ``tokens`` -- the
        same shape and, on cuda, the same addresses every step, through
        every later reserve, trim and recall (the region's addresses never
        change).  Nothing in ``update`` then reads a tensor on the host, so
        a decode step can be captured in a ``torch.cuda.CUDAGraph``: the
        caller passes a 4-D additive attention mask ``(1, 1, 1, tokens)``
        (0 at positions written, the dtype's minimum elsewhere: transformers
        uses a 4-D mask as given), ``position_ids``, and zeroes the window
        past the prompt first (:meth:`zero_static`).  The window must stay
        mapped while a step reads it: within a request's reserve
        (:meth:`begin_request` with at least ``tokens``); after
        :meth:`end_request` trims, replay only once a reserve maps it
        again.  ``tests/gpu/gpu_transformers_graph.py`` does all of this."""
        for kv in self.parts:
            kv.set_static(tokens, index)

    def zero_static(self, start: int = 0) -> None:
        """Zeroes the fixed-shape window's K and V from token ``start``."""
        for kv in self.parts:
            kv.zero_static(start)

    def clear_static(self, tokens: Optional[int] = None) -> None:
        """Leaves the fixed-shape window; ``tokens``: how many tokens the
        cache holds now (the graph's steps are not counted on the host)."""
        for kv in self.parts:
            kv.clear_static(tokens)

    def poll(self) -> None:
        """Dispatches the client's events and fills new expert slots; call
        it while idle between requests, or a RECALL waits (its deadline is
        the stage's recall_deadline_ms)."""
        for ex in self.experts.values():
            ex.poll()
        if self.router is not None and not self.experts:
            self.router.pump()

    def stats(self) -> Dict[int, Dict[str, int]]:
        """Per stage: KV tokens, mapped tokens and bytes, reserves; expert
        loans, slots, resident experts, hits and misses."""
        out: Dict[int, Dict[str, int]] = {}
        for kv in self.parts:
            s = kv.stats() if isinstance(kv, VramKv) else {
                "tokens": kv.lengths[0], "mapped_tokens": kv.mapped_tokens}
            ex = self.experts.get(kv.stage)
            if ex is not None:
                s.update(ex.stats())
            out[kv.stage] = s
        return out


class VramExperts(nn.Module):
    """A fused experts module (``forward(hidden_states, top_k_index,
    top_k_weights)``) whose weights are those of ``stage``'s layer
    ``layer``: resident in vramd's expert slots or computed from the host
    copies. It dispatches the client's events first, looking at most
    every 10 ms (:meth:`ExpertStage.poll_between_layers`; recalled
    slots stay mapped until the RECALL is answered). ``path``:
    "grouped" computes as transformers' ``grouped_mm`` experts
    (:meth:`ExpertStage.run_grouped`) -- or as its ``batched_mm`` ones
    (:meth:`ExpertStage.run_batched`) while the replaced module's
    ``config`` says ``batched_mm``, as ``generate`` sets it for decoding --
    "loop" as the eager loop (:func:`run_experts`); settable between
    forwards."""

    def __init__(self, stage: ExpertStage, layer: int, act_fn: Any,
                 path: str = "loop", config: Any = None) -> None:
        super().__init__()
        if path not in EXPERTS_PATHS:
            raise ValueError(f"experts path {path!r}: one of {EXPERTS_PATHS}")
        self.stage, self.layer, self.act_fn, self.path = stage, layer, act_fn, path
        self.num_experts = stage.num_experts
        # The replaced module's configuration: its _experts_implementation
        # is read at each call, as the module's own forward reads it
        # (generate switches grouped_mm to batched_mm while decoding).
        self.config = config

    def extra_repr(self) -> str:
        return (f"layer={self.layer}, stage={self.stage.stage}, "
                f"experts={self.num_experts}, path={self.path}")

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        self.stage.poll_between_layers()
        if self.path == "grouped":
            if getattr(self.config, "_experts_implementation", None) == "batched_mm":
                return self.stage.run_batched(self.layer, hidden_states, top_k_index,
                                              top_k_weights, self.act_fn)
            return self.stage.run_grouped(self.layer, hidden_states, top_k_index,
                                          top_k_weights, self.act_fn)
        return run_experts(hidden_states, top_k_index, top_k_weights,
                           self.num_experts, self.act_fn,
                           lambda e, n: self.stage.weights(self.layer, e, n))


def experts_path_for(model: nn.Module, device: Any) -> str:
    """The path that computes what the model's own experts compute:
    "grouped" when its ``experts_implementation`` is ``grouped_mm`` and
    torch's grouped multiply runs on ``device``
    (:func:`~vram.integrations.experts.grouped_mm_usable`), "loop"
    otherwise (``eager``, ``batched_mm`` -- whose numbers are neither --,
    the CPU before PyTorch 2.9)."""
    impl = getattr(model.config, "_experts_implementation", None)
    return "grouped" if impl == "grouped_mm" and grouped_mm_usable(device) else "loop"


def set_experts_path(model: nn.Module, path: str) -> int:
    """Sets every VramExperts module's ``path`` ("grouped", "loop");
    returns how many there are."""
    if path not in EXPERTS_PATHS:
        raise ValueError(f"experts path {path!r}: one of {EXPERTS_PATHS}")
    n = 0
    for m in model.modules():
        if isinstance(m, VramExperts):
            m.path = path
            n += 1
    return n


# ---- finding the model's parts ----------------------------------------------------

def model_dims(model: Any) -> Tuple[int, int, int, torch.dtype]:
    """(layers, kv_heads, head_dim, dtype) of a decoder-only model."""
    cfg = model.config
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config(decoder=True)
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return layers, kv_heads, head_dim, model.dtype


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def find_experts(model: nn.Module) -> Dict[int, Tuple[nn.Module, str, nn.Module]]:
    """The fused experts modules of a model, by layer: layer -> (parent,
    attribute, module).  A module counts when it has 3-D
    ``gate_up_proj`` and ``down_proj`` and an ``act_fn`` (transformers'
    fused experts, Qwen3-MoE's ``Qwen3MoeExperts``)."""
    found: Dict[int, Tuple[nn.Module, str, nn.Module]] = {}
    for name, module in model.named_modules():
        gu, dn = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
        if not (isinstance(gu, torch.Tensor) and isinstance(dn, torch.Tensor)
                and gu.dim() == 3 and dn.dim() == 3 and hasattr(module, "act_fn")):
            continue
        if getattr(module, "has_bias", False) or getattr(module, "is_transposed", False):
            raise NotImplementedError(f"{name} ({type(module).__name__}) has biases "
                                      "or transposed weights: not supported")
        m = _LAYER_RE.search(name + ".")
        if m is None:
            raise ValueError(f"{name}: an experts module outside the decoder's "
                             "layers.N: cannot tell its layer")
        parent_name, _, attr = name.rpartition(".")
        found[int(m.group(1))] = (model.get_submodule(parent_name), attr, module)
    return found


def _stage_of_client(client: Any, stage: int) -> None:
    """Registers the stage unless this client has it."""
    try:
        client.stage_info(stage)
    except VramError as e:
        if e.errno != _errno.ENOENT:
            raise
        client.stage_register(stage)


def _swap_experts(model: nn.Module, client: Any, parts: Sequence[VramKv],
                  router: EventRouter, device: torch.device,
                  path: str) -> Dict[int, ExpertStage]:
    """Replaces the experts modules of each stage's layers by VramExperts;
    the old modules (and their GPU weights) are referenced from nowhere
    once this returns."""
    found = find_experts(model)
    if not found:
        raise ValueError(f"{type(model).__name__} has no fused experts modules "
                         "(gate_up_proj/down_proj): use experts=False")
    by_stage: Dict[int, ExpertStage] = {}
    for kv in parts:
        mine = {l: found.pop(l) for l in range(kv.first_layer, kv.first_layer + kv.nlayers)
                if l in found}
        if not mine:
            continue
        host = {l: HostExperts(m.gate_up_proj, m.down_proj, pin=device.type == "cuda")
                for l, (_, _, m) in mine.items()}
        ex = by_stage[kv.stage] = ExpertStage(client, kv.stage, host, device, router=router)
        if path == "grouped" and grouped_mm_usable(device) and not ex.grouped_layout_ok():
            raise ValueError(f"stage {kv.stage}: expert_slot {ex.slot_bytes} bytes, "
                             f"hidden {ex.hidden}, intermediate {ex.intermediate} "
                             f"({ex.dtype}): the grouped path needs the slot, a row "
                             "and the down matrix at multiples of 16 bytes; use "
                             "experts_path='loop'")
        for l, (parent, attr, m) in mine.items():
            setattr(parent, attr, VramExperts(ex, l, m.act_fn, path=path,
                                              config=getattr(m, "config", None)))
    if found:
        raise ValueError(f"experts modules of layers {sorted(found)} are in no stage")
    return by_stage


def install(model: nn.Module, client: Any, stages: Sequence[int], *,
            experts: bool = True, reserve_ahead: int = 0,
            experts_path: str = "auto") -> VramCache:
    """Puts ``model`` on vramd: returns a :class:`VramCache` over the
    given stages of vramd's configuration (registered here when this
    client has not yet; their layer ranges must cover the model's layers
    once) and, with ``experts``, replaces every fused experts module by a
    :class:`VramExperts` over its stage's expert loans (the weights move
    to host memory, pinned on cuda; the GPU copies are freed).

    The stages' ``kv_lanes`` must match the model's K and V
    (:class:`~vram.integrations.kv.VramKv` says what to configure), and
    their ``expert_slot`` hold one expert.  Every stage is registered
    before any asks for loans (loans take what memory is left).
    ``reserve_ahead``: tokens beyond the need that a reserve in the middle
    of a request asks for (vramd rounds up to the growth step anyway).

    ``experts_path``: how the new modules compute. "auto" (the default)
    follows the model (:func:`experts_path_for`): ``grouped_mm`` -- what
    transformers 5 picks on a GPU -- gives "grouped" where torch's grouped
    multiply runs (transformers' grouped_mm numbers, one grouped multiply
    over the slot table, no host synchronisation while every expert of a
    layer is resident), anything else "loop" (the eager loop's numbers; a
    model on ``batched_mm`` gets those from now on). "grouped" or "loop"
    choose; :func:`set_experts_path` changes it later.  Batch 1 only."""
    if not stages:
        raise ValueError("no stages given")
    if experts_path not in ("auto",) + EXPERTS_PATHS:
        raise ValueError(f"experts_path {experts_path!r}: auto, grouped or loop")
    nlayers, kv_heads, head_dim, dtype = model_dims(model)
    device = next(model.parameters()).device
    want = "cuda" if client.backend == "cuda" else "cpu"
    if device.type != want:
        raise ValueError(f"the model is on {device}; vramd's {client.backend} "
                         f"backend's memory is {want} memory: move the model there")
    for s in stages:
        _stage_of_client(client, s)
    parts = [VramKv(client, s, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
                    reserve_ahead=reserve_ahead) for s in stages]
    router = EventRouter(client)
    # Made first: it checks that the stages cover the layers, before any
    # module is swapped.
    cache = VramCache(parts, nlayers, router=router)
    if experts:
        path = experts_path_for(model, device) if experts_path == "auto" else experts_path
        cache.experts = _swap_experts(model, client, parts, router, device, path)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the experts' GPU copies, gone with the modules
        for ex in cache.experts.values():
            ex.refill(rebalance=False)
    cache.poll()
    return cache


#: SDPA's backends by short name (:func:`sdpa_backends`).
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "math": "MATH",
                 "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def sdpa_backends(names: str) -> Any:
    """A context in which ``scaled_dot_product_attention`` takes only the
    named backends: "flash,math" (both give the same bits run after run),
    or "any" (torch's choice). To compare tokens with plain memory, run
    both under one that repeats: on an H200 torch 2.11 chooses cuDNN's,
    whose decode attention differs between two runs of the same model and
    prompt (measured: another token at step 36 of 128), which no memory
    can be blamed for. ``ValueError`` names the unknown backend."""
    if names == "any":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    picked = []
    for n in names.split(","):
        if n not in SDPA_BACKENDS:
            raise ValueError(f"SDPA backend {n!r}: one of {', '.join(SDPA_BACKENDS)}, "
                             "or any")
        picked.append(getattr(SDPBackend, SDPA_BACKENDS[n]))
    return sdpa_kernel(picked)


def plain_cache(model: nn.Module, layer_ranges: Sequence[Tuple[int, int]],
                capacity_tokens: int, layouts: Union[str, Sequence[str]] = "lanes") -> VramCache:
    """A :class:`VramCache` in ordinary torch memory, with the same layout
    (and so the same strides) as vramd's: the reference, which computes
    what the same model over vramd computes. ``layer_ranges`` (first,
    last) per stage; ``layouts`` one for all or one a stage ("lanes",
    "interleaved": what the stages' ``kv_lanes`` make of vramd's)."""
    nlayers, kv_heads, head_dim, dtype = model_dims(model)
    device = next(model.parameters()).device
    if isinstance(layouts, str):
        layouts = [layouts] * len(layer_ranges)
    if len(layouts) != len(layer_ranges):
        raise ValueError(f"{len(layouts)} layouts for {len(layer_ranges)} stages")
    parts = [PlainKv(capacity_tokens=capacity_tokens, device=device, stage=i,
                     first_layer=first, nlayers=last - first + 1,
                     kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, layout=layout)
             for i, ((first, last), layout) in enumerate(zip(layer_ranges, layouts))]
    return VramCache(parts, nlayers)
