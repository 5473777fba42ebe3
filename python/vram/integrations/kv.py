# SPDX-License-Identifier: Apache-2.0
"""A vramd stage's KV region as per-layer K and V tensors (PyTorch, no
transformers).

**The layout.**  vramd maps a KV budget as the first chunk slots of *every
lane* of the stage's KV region (``docs/engines.md``, "The address model"):
lane ``l`` starts at ``base + l * lane_stride`` and a reserve for ``N``
tokens backs ``ceil(N * bytes_per_token / chunk_bytes)`` slots of each lane
from slot 0.  So the mapped window is a prefix of each lane, not of the
region, and the layout that makes it whole tokens is *token-major within a
lane*.  Two layouts do that, and a :class:`VramKv` takes either, as the
stage's ``kv_lanes`` say:

- ``"lanes"`` (``kv_lanes`` count ``2 * layers``, ``bytes_per_token`` =
  ``kv_heads * head_dim * itemsize``): lane ``2 * i`` is layer ``i``'s K,
  lane ``2 * i + 1`` its V, each ``[token][kv_heads][head_dim]``.  This is
  the seed's configuration (one lane per attention layer and K or V), and
  the default of the scripts here: a layer's K is one contiguous range,
  ``head_dim`` elements apart per head and ``kv_heads * head_dim`` per
  token.  Each lane rounds up to whole chunks, so a budget maps up to one
  chunk per lane more than it needs.
- ``"interleaved"`` (``kv_lanes`` count 1, ``bytes_per_token`` = ``2 *
  layers * kv_heads * head_dim * itemsize``): one lane
  ``[token][layer][K, V][kv_heads][head_dim]``, so the first ``N`` tokens
  of all layers are the lane's first ``N * bytes_per_token`` bytes (at most
  one chunk more than needed), and each layer's K is a strided view whose
  tokens lie ``2 * layers * kv_heads * head_dim`` elements apart.

Either way a layer's K and V are views of shape ``(tokens, kv_heads,
head_dim)`` over the lane's mapped memory, with the same strides whether
the memory is vramd's or ordinary (:class:`PlainKv`, the reference), and
what :meth:`LaneKv.append` returns is ``view[:L]`` transposed to
transformers' ``(1, kv_heads, L, head_dim)``: nothing is concatenated or
copied but the new tokens, written in place.

**Addresses.**  On the cuda backend the lane tensors are at the region's
own device addresses, which never change: a view made again after a
reserve has the same ``data_ptr`` (CUDA graphs captured over it replay).
On the host backend each view is a mapping of its own (``docs/python.md``,
"Views outlive nothing"), so views made after a reserve have other
addresses over the same chunks; between reserves the returned views keep
their address.

**A fixed-shape window.**  :meth:`LaneKv.set_static` keeps every layer's
K and V over the first ``T`` tokens as ``(1, kv_heads, T, head_dim)``
views and :meth:`LaneKv.write_at` writes a step's token at a position
tensor (``index_copy_``): no host-side value in a step, one shape and, on
cuda, one address per layer -- what a CUDA graph captured over a decode
step needs (``tests/gpu/gpu_transformers_graph.py``).

**Batch 1.**  One sequence per cache: ``append`` refuses a batch of more
than one (``ValueError``).
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import VramError

__all__ = ["LaneKv", "PlainKv", "VramKv", "LAYOUTS", "lane_token_bytes"]

#: The layouts a stage's KV region can have (see the module documentation).
LAYOUTS = ("lanes", "interleaved")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def lane_token_bytes(kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes one token takes in one layer's K (or V)."""
    return kv_heads * head_dim * _itemsize(dtype)


class LaneKv:
    """Per-layer K and V of ``nlayers`` consecutive layers over lanes laid
    out as ``layout`` says; subclasses say where the lanes' memory is
    (:class:`VramKv`: a vramd stage; :class:`PlainKv`: ordinary torch
    memory).  Layers are numbered locally, 0 for ``first_layer``.

    Per layer it keeps how many tokens are written (``lengths``); a write
    that passes the mapped window first maps more (:meth:`ensure`)."""

    def __init__(self, *, stage: int, first_layer: int, nlayers: int,
                 kv_heads: int, head_dim: int, dtype: torch.dtype,
                 layout: str) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: one of {LAYOUTS}")
        if nlayers < 1 or kv_heads < 1 or head_dim < 1:
            raise ValueError(f"nlayers={nlayers}, kv_heads={kv_heads}, "
                             f"head_dim={head_dim}: each must be positive")
        self.stage, self.first_layer, self.nlayers = stage, first_layer, nlayers
        self.kv_heads, self.head_dim, self.dtype = kv_heads, head_dim, dtype
        self.layout = layout
        self.itemsize = _itemsize(dtype)
        #: Bytes of one token in one lane.
        self.token_stride_bytes = (lane_token_bytes(kv_heads, head_dim, dtype)
                                   * (1 if layout == "lanes" else 2 * nlayers))
        self.lengths: List[int] = [0] * nlayers
        #: How many times the window grew (a reserve that mapped more).
        self.grows = 0
        self._views: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None
        # The same views as (1, kv_heads, tokens, head_dim), made once per
        # window: a decode step slices them instead of building the
        # transpose again (the per-step Python work of append).
        self._views4: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self._mapped = 0
        #: Per layer (1, kv_heads, T, head_dim) K and V over the first T
        #: tokens while a fixed-shape window is set (:meth:`set_static`).
        self.static: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None
        self.static_tokens = 0
        self.static_index: Optional[torch.Tensor] = None

    # ---- what subclasses provide ------------------------------------------

    @property
    def lanes(self) -> int:
        return 2 * self.nlayers if self.layout == "lanes" else 1

    def _lane_tensors(self) -> List[torch.Tensor]:
        """Flat tensors (of dtype) over each lane's mapped memory, from its
        start."""
        raise NotImplementedError

    def _grow(self, tokens: int) -> None:
        """Maps at least ``tokens`` tokens of every lane."""
        raise NotImplementedError

    # ---- the views ----------------------------------------------------------

    def _make_views(self) -> None:
        flats = self._lane_tensors()
        per_token = self.token_stride_bytes // self.itemsize
        tokens = min(f.numel() // per_token for f in flats)
        h, d = self.kv_heads, self.head_dim
        views = []
        if self.layout == "lanes":
            for i in range(self.nlayers):
                k = flats[2 * i][:tokens * h * d].view(tokens, h, d)
                v = flats[2 * i + 1][:tokens * h * d].view(tokens, h, d)
                views.append((k, v))
        else:
            x = flats[0][:tokens * per_token].view(tokens, 2 * self.nlayers, h, d)
            for i in range(self.nlayers):
                views.append((x[:, 2 * i], x[:, 2 * i + 1]))
        self._views, self._mapped = views, tokens
        self._views4 = [(k.permute(1, 0, 2).unsqueeze(0), v.permute(1, 0, 2).unsqueeze(0))
                        for k, v in views]

    def _drop_views(self) -> None:
        self._views, self._views4, self._mapped = None, [], 0

    @property
    def mapped_tokens(self) -> int:
        """Tokens every layer's K and V can hold now (the mapped window)."""
        if self._views is None:
            self._make_views()
        return self._mapped

    def layer(self, local: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Layer ``local``'s K and V over the whole mapped window, each
        ``(mapped_tokens, kv_heads, head_dim)``; tokens at and past
        ``lengths[local]`` are not written yet."""
        if not 0 <= local < self.nlayers:
            raise IndexError(f"layer {local} of stage {self.stage}: it has "
                             f"{self.nlayers} (local 0..{self.nlayers - 1})")
        if self._views is None:
            self._make_views()
        return self._views[local]

    def ensure(self, tokens: int) -> bool:
        """Makes the window hold ``tokens`` tokens; True when it had to map
        more (the views are made again: on cuda at the same addresses)."""
        if tokens <= self.mapped_tokens:
            return False
        self._drop_views()
        self._grow(tokens)
        self.grows += 1
        self._make_views()
        if self._mapped < tokens:
            raise ValueError(
                f"stage {self.stage}: mapped {self._mapped} tokens where "
                f"{tokens} were reserved: its kv_lanes' bytes_per_token is "
                f"smaller than this layout's {self.token_stride_bytes} bytes a "
                "token per lane (the model's kv_heads * head_dim * itemsize"
                + (")" if self.layout == "lanes" else
                   f" * 2 * {self.nlayers} layers)"))
        return True

    # ---- writing -------------------------------------------------------------

    def append(self, local: int, key_states: torch.Tensor,
               value_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Writes the new tokens of layer ``local`` in place after those it
        has, mapping more first when they pass the window, and returns its
        K and V of all its tokens as ``(1, kv_heads, L, head_dim)`` views
        (transformers' shape), over the lanes' memory."""
        # A decode step calls this once a layer and its host time is the
        # step's (launch-bound): the checks are one unpack and a few
        # compares, the views narrow() (one call each, not a slicing tuple).
        shape = key_states.shape
        if len(shape) != 4 or value_states.shape != shape:
            self._bad_states(key_states, value_states)
        b, h, n, d = shape
        if (b != 1 or h != self.kv_heads or d != self.head_dim
                or key_states.dtype is not self.dtype or value_states.dtype is not self.dtype):
            self._bad_states(key_states, value_states)
        if not 0 <= local < self.nlayers:
            raise IndexError(f"layer {local} of stage {self.stage}: it has "
                             f"{self.nlayers} (local 0..{self.nlayers - 1})")
        pos = self.lengths[local]
        end = pos + n
        if self._views is None or end > self._mapped:
            self.ensure(end)
        k4, v4 = self._views4[local]
        if key_states.device != k4.device:
            raise ValueError(f"key states on {key_states.device}: stage "
                             f"{self.stage}'s KV is on {k4.device}")
        # (1, h, L, d) views over the token-major lane: the same strides
        # as view[:L].transpose(0, 1).unsqueeze(0), built once a window.
        k4.narrow(2, pos, n).copy_(key_states)
        v4.narrow(2, pos, n).copy_(value_states)
        self.lengths[local] = end
        return k4.narrow(2, 0, end), v4.narrow(2, 0, end)

    def _bad_states(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Raises what is wrong with states append refused."""
        if key_states.shape != value_states.shape:
            raise ValueError(f"key states {tuple(key_states.shape)} and value "
                             f"states {tuple(value_states.shape)} differ in shape")
        if key_states.dim() != 4:
            raise ValueError(f"key states of shape {tuple(key_states.shape)}: "
                             "expected (batch, kv_heads, tokens, head_dim)")
        b, h, n, d = key_states.shape
        if b != 1:
            raise ValueError(f"batch {b}: this cache holds one sequence "
                             "(batch 1)")
        if (h, d) != (self.kv_heads, self.head_dim):
            raise ValueError(f"{h} heads of {d}: stage {self.stage}'s cache "
                             f"was laid out for {self.kv_heads} KV heads of "
                             f"{self.head_dim}")
        raise TypeError(f"key/value states of {key_states.dtype}/"
                        f"{value_states.dtype}: the cache holds {self.dtype}")

    # ---- a fixed-shape window (CUDA graphs) -----------------------------------

    def set_static(self, tokens: int, index: Optional[torch.Tensor] = None
                   ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """Maps ``tokens`` tokens (:meth:`ensure`) and keeps every layer's
        K and V over the first ``tokens`` as ``(1, kv_heads, tokens,
        head_dim)`` views (:attr:`static`), which :meth:`write_at` writes
        into: one shape and one address per layer for as long as the window
        is set, so that a step captured in a CUDA graph over them replays.
        Their memory must stay mapped while they are used: a :meth:`trim`
        below ``tokens`` unmaps their tail (on cuda they then point at
        unmapped memory until a reserve maps it again, at the same
        addresses).  ``index``: the positions :meth:`write_at` writes at
        when it is given none (a tensor the caller sets before each step)."""
        self.ensure(tokens)
        self.static = [(k4[:, :, :tokens], v4[:, :, :tokens]) for k4, v4 in self._views4]
        self.static_tokens, self.static_index = tokens, index
        return self.static

    def clear_static(self, tokens: Optional[int] = None) -> None:
        """Leaves the fixed-shape window; ``tokens``: how many tokens
        every layer now holds (the steps run over :meth:`write_at` are not
        counted on the host)."""
        self.static, self.static_tokens, self.static_index = None, 0, None
        if tokens is not None:
            self.lengths = [tokens] * self.nlayers

    def write_at(self, local: int, key_states: torch.Tensor, value_states: torch.Tensor,
                 index: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """In the fixed-shape window: writes layer ``local``'s new tokens
        at the positions in ``index`` (a 1-D int64 tensor on the KV's
        device, as many as the tokens; None: :meth:`set_static`'s) and
        returns its whole ``(1, kv_heads, T, head_dim)`` K and V; positions
        not written yet are
        whatever the memory holds, so the caller's attention mask must hide
        them and their values must be finite (:meth:`zero_static`).
        Nothing here reads a tensor's value on the host: a step over it can
        be captured in a CUDA graph."""
        if self.static is None:
            raise RuntimeError(f"stage {self.stage}: no fixed-shape window "
                               "(set_static first)")
        if index is None:
            index = self.static_index
        k4, v4 = self.static[local]
        k4.index_copy_(2, index, key_states)
        v4.index_copy_(2, index, value_states)
        return k4, v4

    def zero_static(self, start: int = 0) -> None:
        """Zeroes every layer's K and V in the fixed-shape window from token
        ``start`` on (memory that a reserve mapped may hold anything, and a
        masked position still enters attention's products)."""
        if self.static is None:
            raise RuntimeError(f"stage {self.stage}: no fixed-shape window")
        for k4, v4 in self.static:
            k4[:, :, start:].zero_()
            v4[:, :, start:].zero_()

    def crop(self, tokens_to_remove: int, layer: Optional[int] = None) -> None:
        """Forgets the last ``-tokens_to_remove`` tokens of ``layer`` (all
        layers when None), as transformers' ``crop``; a positive value is
        the length to keep (its older meaning).  Nothing is unmapped:
        :meth:`trim` does that."""
        for i in range(self.nlayers) if layer is None else (layer,):
            n = self.lengths[i]
            keep = n + tokens_to_remove if tokens_to_remove <= 0 else min(n, tokens_to_remove)
            self.lengths[i] = max(keep, 0)

    def reset(self, layer: Optional[int] = None) -> None:
        """Forgets every token of ``layer`` (all layers when None); the
        memory stays mapped."""
        for i in range(self.nlayers) if layer is None else (layer,):
            self.lengths[i] = 0

    def trim(self, tokens: int = 0) -> None:
        """After a request: forgets the tokens past ``tokens`` and gives the
        memory past them back (:class:`VramKv`: to the stage's expert
        loans)."""
        if tokens:
            self.crop(tokens)
        else:
            self.reset()

    def data_ptrs(self) -> List[Tuple[int, int]]:
        """Each layer's K and V addresses (for checks that they stay)."""
        return [(k.data_ptr(), v.data_ptr())
                for k, v in (self.layer(i) for i in range(self.nlayers))]


class PlainKv(LaneKv):
    """The same layout in ordinary torch memory, allocated whole for
    ``capacity_tokens`` (the reference, and an engine's plain mode): the
    same views with the same strides, so attention computes the same."""

    def __init__(self, *, capacity_tokens: int, device: Any = "cpu",
                 stage: int = 0, first_layer: int = 0, nlayers: int,
                 kv_heads: int, head_dim: int, dtype: torch.dtype,
                 layout: str = "lanes") -> None:
        super().__init__(stage=stage, first_layer=first_layer, nlayers=nlayers,
                         kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
                         layout=layout)
        self.capacity_tokens = capacity_tokens
        per_lane = capacity_tokens * self.token_stride_bytes // self.itemsize
        self._buffer = torch.zeros(self.lanes, per_lane, dtype=dtype, device=device)

    def _lane_tensors(self) -> List[torch.Tensor]:
        return [self._buffer[i] for i in range(self.lanes)]

    def _grow(self, tokens: int) -> None:
        raise VramError(_errno.E2BIG, f"stage {self.stage}: {tokens} tokens "
                        f"exceed the plain cache's {self.capacity_tokens}")


class VramKv(LaneKv):
    """The KV region of a vramd stage this client registered, as per-layer
    K and V.  ``kv_heads``, ``head_dim`` and ``dtype`` are the model's; the
    stage's ``kv_lanes`` decide the layout: ``2 * layers`` lanes of
    ``kv_heads * head_dim * itemsize`` bytes a token (``"lanes"``), or one
    lane of ``2 * layers`` times that (``"interleaved"``); anything else is
    refused (``ValueError``, saying what to configure).

    A write past the mapped window reserves (``kv_reserve(stage, tokens,
    reserve_ahead)``, with hold: it may wait for recalls up to the stage's
    ``hold_ms``), which vramd rounds up to the stage's growth step; a
    request past the native context fails with VramError E2BIG.
    :meth:`reserve` maps a request's whole budget before decode (prompt
    plus every output token: then decode never allocates).  :meth:`trim`
    gives the KV past the initial window back after a request: vramd lends
    it to the stage's experts."""

    def __init__(self, client: Any, stage: int, *, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, reserve_ahead: int = 0) -> None:
        info = client.stage_info(stage)
        if not info.kv_region:
            raise ValueError(f"stage {stage} has no KV region")
        nlayers = info.last_layer - info.first_layer + 1
        ri = client.region_info(info.kv_region)
        ltb = lane_token_bytes(kv_heads, head_dim, dtype)
        if ri.lanes == 2 * nlayers:
            layout = "lanes"
        elif ri.lanes == 1:
            layout = "interleaved"
        else:
            raise ValueError(
                f"stage {stage} (layers {info.first_layer}-{info.last_layer}) "
                f"has {ri.lanes} KV lanes: the cache needs one per layer and K "
                f"or V (kv_lanes count {2 * nlayers}, bytes_per_token {ltb}) or "
                f"one for all (count 1, bytes_per_token {2 * nlayers * ltb})")
        super().__init__(stage=stage, first_layer=info.first_layer,
                         nlayers=nlayers, kv_heads=kv_heads, head_dim=head_dim,
                         dtype=dtype, layout=layout)
        slots = {client.region_lane_slots(info.kv_region, l) for l in range(ri.lanes)}
        if len(slots) != 1:
            raise ValueError(f"stage {stage}'s KV lanes differ in length "
                             f"({sorted(slots)} slots): this layout needs "
                             "lanes of one bytes_per_token")
        self.client, self.region = client, info.kv_region
        self.chunk_bytes = ri.chunk_bytes
        self.reserve_ahead = reserve_ahead
        #: The tokens a lane's address range can hold in this layout (the
        #: stage's native context, rounded up to whole chunks).
        self.capacity_tokens = slots.pop() * ri.chunk_bytes // self.token_stride_bytes
        #: Reserves made, and what the last one said (vram.KvResult).
        self.reserves = 0
        self.last_reserve = None

    def _lane_tensors(self) -> List[torch.Tensor]:
        # nslots None: as many slots as are mapped from slot 0 (a budget is
        # always the first slots of each lane).
        return [self.client.lane_tensor(self.region, lane, dtype=self.dtype)
                for lane in range(self.lanes)]

    def _grow(self, tokens: int) -> None:
        self.last_reserve = self.client.kv_reserve(self.stage, tokens,
                                                   self.reserve_ahead)
        self.reserves += 1

    def reserve(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Before decode: maps KV for the prompt and every output token (the
        output budget), so that decode never allocates; True when it mapped
        more.  VramError E2BIG past the native context (nothing is
        clamped)."""
        return self.ensure(prompt_tokens + output_tokens)

    def trim(self, tokens: int = 0) -> None:
        """After a request: KV back to the initial window (``tokens`` 0) or
        to ``tokens`` (rounded up to the growth step), the surplus lent to
        the stage's experts (``kv_trim``); the views are made again on next
        use (those past the initial window are invalidated by the trim)."""
        super().trim(tokens)
        self._drop_views()
        self.client.kv_trim(self.stage, tokens)

    def mapped_bytes(self) -> int:
        """The stage's mapped KV bytes, in whole chunks (``stage_info``)."""
        return int(self.client.stage_info(self.stage).kv_mapped_bytes)

    def lane_address(self, lane: int) -> int:
        """The region's address of lane's slot 0 (fixed for the region's
        life): on cuda, layer views' ``data_ptr`` are at it (plus the
        layer's offset in the interleaved layout)."""
        addr = self.client.region_slot(self.region, lane, 0)
        if addr is None:
            raise IndexError(f"stage {self.stage} has no KV lane {lane}")
        return int(addr)

    def stats(self) -> Dict[str, int]:
        """Figures for a table: tokens written (layer 0's), mapped tokens and
        bytes, reserves made."""
        return {"tokens": self.lengths[0], "mapped_tokens": self.mapped_tokens,
                "kv_mapped_bytes": self.mapped_bytes(), "reserves": self.reserves}
