# SPDX-License-Identifier: Apache-2.0
"""The values libvram hands back, as Python types: enums and dataclasses
that mirror vram.h's structs field for field (copies: none of them points
into the library)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any, Tuple, Type, TypeVar, Union

from . import _lib

__all__ = [
    "EventType",
    "RegionKind",
    "Event",
    "StageInfo",
    "RegionInfo",
    "KvResult",
    "Residency",
    "DeviceInfo",
]


class EventType(enum.IntEnum):
    """``enum vram_event_type``: what an :class:`Event` announces."""

    #: The daemon wants chunks of the stage's expert region back: slots
    #: [slot_first, slot_end) lose their memory when the callback returns.
    RECALL = 1
    #: The stage's expert residency changed (slots below
    #: expert_slots_backed are backed).
    BUDGET_CHANGED = 2
    #: The stage's own kv_reserve moves expert chunks into its KV: slots
    #: [slot_first, slot_end) lose their memory when the callback returns.
    EXPERT_SHRINK = 3
    #: The library connected again and took back what it holds.
    RECONNECTED = 4
    #: During a reconnect a stage could not be taken back: register again.
    STAGE_LOST = 5


class RegionKind(enum.IntEnum):
    """``enum vram_region_kind``."""

    KV = 0
    EXPERT = 1
    FIXED = 2
    DRAFT_KV = 3


def _enum(cls: Type[enum.IntEnum], value: int) -> Union[enum.IntEnum, int]:
    """The enum member for value, or the plain int for a newer library's
    value this package does not know yet."""
    try:
        return cls(value)
    except ValueError:
        return int(value)


T = TypeVar("T")


def _copy(cls: Type[T], s: Any, **override: Any) -> T:
    """A dataclass of cls from the ctypes struct s, field by field."""
    kw = {}
    for f in fields(cls):  # type: ignore[arg-type]
        kw[f.name] = override[f.name] if f.name in override else getattr(s, f.name)
    return cls(**kw)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


@dataclass(frozen=True)
class Event:
    """``struct vram_event``, copied while the callback runs.

    ``chunks`` is a tuple of the ``nchunks`` chunk ids leaving (RECALL,
    EXPERT_SHRINK), copied from the C array that is valid only during the
    callback; empty for other events.  ``type`` is an :class:`EventType`
    (a plain int for a type this package does not know).
    """

    type: Union[EventType, int]
    stage: int
    residency_version: int
    expert_slots_backed: int
    expert_loaned_bytes: int
    nchunks: int
    deadline_ms: int
    lost_chunks: int
    slot_first: int
    slot_end: int
    chunks: Tuple[int, ...]

    @classmethod
    def from_c(cls, ev: "_lib.vram_event") -> "Event":
        """Copies a ``struct vram_event`` (chunks included)."""
        n = ev.nchunks
        chunks = tuple(ev.chunks[:n]) if ev.chunks and n else ()
        return _copy(cls, ev, type=_enum(EventType, ev.type), chunks=chunks)


@dataclass(frozen=True)
class StageInfo:
    """``struct vram_stage_info``: a stage's figures as this process maps
    them."""

    stage: int
    device: int
    first_layer: int
    last_layer: int
    kv_region: int
    expert_region: int
    kv_mapped_bytes: int
    kv_max_bytes: int
    expert_loaned_bytes: int
    expert_slots_backed: int
    expert_slot_bytes: int

    @classmethod
    def from_c(cls, s: "_lib.vram_stage_info") -> "StageInfo":
        """Copies a ``struct vram_stage_info``."""
        return _copy(cls, s)


@dataclass(frozen=True)
class RegionInfo:
    """``struct vram_region_info``.  ``base`` is the region's address as an
    int (it never changes); ``lane_slots`` is lane 0's usable slots."""

    id: int
    stage: int
    device: int
    kind: Union[RegionKind, int]
    base: int
    lane_stride: int
    lanes: int
    lane_slots: int
    chunk_bytes: int
    mapped: int

    @classmethod
    def from_c(cls, s: "_lib.vram_region_info") -> "RegionInfo":
        """Copies a ``struct vram_region_info``."""
        return _copy(cls, s, kind=_enum(RegionKind, s.kind), base=s.base or 0)


@dataclass(frozen=True)
class KvResult:
    """``struct vram_kv_result``: what a kv_reserve did."""

    kv_needed_bytes: int
    kv_mapped_bytes: int
    expert_loaned_bytes: int
    expert_slots_backed: int
    recalled_chunks: int

    @classmethod
    def from_c(cls, s: "_lib.vram_kv_result") -> "KvResult":
        """Copies a ``struct vram_kv_result``."""
        return _copy(cls, s)


@dataclass(frozen=True)
class Residency:
    """``struct vram_residency``: slots below expert_slots_backed have
    memory; version counts the changes."""

    version: int
    expert_slots_backed: int
    expert_loaned_bytes: int

    @classmethod
    def from_c(cls, s: "_lib.vram_residency") -> "Residency":
        """Copies a ``struct vram_residency``."""
        return _copy(cls, s)


@dataclass(frozen=True)
class DeviceInfo:
    """``struct vram_device_info``: one of the daemon's devices.  The C
    char arrays (backend, name, uuid) are decoded to str."""

    id: int
    backend: str
    name: str
    uuid: str
    chunk_bytes: int
    capacity_bytes: int
    free_bytes: int
    granted_bytes: int
    loaned_bytes: int
    total_bytes: int

    @classmethod
    def from_c(cls, s: "_lib.vram_device_info") -> "DeviceInfo":
        """Copies a ``struct vram_device_info``."""
        return _copy(cls, s, backend=_text(s.backend), name=_text(s.name),
                     uuid=_text(s.uuid))
