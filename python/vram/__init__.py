# SPDX-License-Identifier: Apache-2.0
"""vram: Python bindings of libvram, the client library of vramd (the GPU
memory broker).

An engine connects to the daemon, registers its pipeline stages and gets
memory as regions whose addresses never move; per request it reserves KV
and trims it after, and memory its KV does not use is lent to it for MoE
experts.  ``client/include/vram.h`` is the contract and
``docs/engines.md`` the guide; this package follows them call for call::

    import vram

    def on_event(ev: vram.Event) -> None:
        if ev.type in (vram.EventType.RECALL, vram.EventType.EXPERT_SHRINK):
            evict(ev.stage, range(ev.slot_first, ev.slot_end))

    with vram.Client(name="my-engine", on_event=on_event) as c:
        info = c.stage_register(0)
        c.expert_request(0)
        c.kv_reserve(0, prompt=4096, output=512)
        ...
        c.kv_trim(0)

Why ctypes (from the standard library) and not a compiled extension: there
is no build step and no compiler is needed at install time (the package is
plain Python files), libvram's ABI is plain C -- functions returning ints,
pointers and small structs of fixed-size integers, no macros to expand and
no inline functions -- so ctypes can describe it exactly (``vram._lib``
mirrors every struct field for field), and the same package works with any
libvram.so.0 the system has.

libvram is found as ``$VRAM_LIB`` (a path) when set, else
``ctypes.util.find_library("vram")``, else ``libvram.so.0``; it is loaded
when the first :class:`Client` is made.

Errors: every failed call raises :class:`VramError` (an ``OSError``) with
the positive ``errno``, vramd's meaning of it and the daemon's message.
Exceptions raised by an event handler are re-raised from the call that
delivered the event, once it returned (see :class:`Client`).

Integer arguments are range-checked before they reach ctypes (which would
wrap them modulo 2**32 or 2**64): a bad one raises TypeError, ValueError
(negative for an unsigned type) or OverflowError, naming the call and the
argument (see :class:`Client`).

Memory views (:meth:`Client.lane_view`, :meth:`Client.expert_slot_view`)
are numpy arrays over the mapped memory, zero-copy, on the host backend;
they need numpy, which is imported only when a view is made.  When the
memory under a view goes (a trim, a release, a recall, close) the view is
invalidated and reads zeros instead of faulting (:meth:`Client.view_valid`,
:meth:`Client.check_view`; ``docs/python.md``).

Weight sets (:meth:`Client.weights_open`, :class:`Weights`,
:func:`weights_key`): weights that outlive their engine, written once by
the first engine that opens the name, then mapped read-only by every
engine after it, zero-copy, as numpy arrays or torch tensors.
"""

from __future__ import annotations

from ._lib import VRAM_KV_HOLD, VRAM_STAGE_KEEP_WINDOW
from .client import Client, EventHandler, PendingKvResult
from .errors import VramError, strerror
from .stage import Stage
from .weights import Weights, weights_key
from .types import (
    DeviceInfo,
    Event,
    EventType,
    KvResult,
    RegionInfo,
    RegionKind,
    Residency,
    StageInfo,
)

__all__ = [
    "Client",
    "DeviceInfo",
    "Event",
    "EventHandler",
    "EventType",
    "KvResult",
    "PendingKvResult",
    "RegionInfo",
    "RegionKind",
    "Residency",
    "Stage",
    "StageInfo",
    "VRAM_KV_HOLD",
    "VRAM_STAGE_KEEP_WINDOW",
    "VramError",
    "Weights",
    "strerror",
    "weights_key",
]

#: This package's version (the slice of vram.h it binds: all of it).
__version__ = "0.2.0"
