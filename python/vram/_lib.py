# SPDX-License-Identifier: Apache-2.0
"""The ctypes declarations of libvram: every struct and function of vram.h.

Each ``Structure`` below mirrors its C struct field for field, in the same
order and with the same types, so that ctypes lays it out exactly as the C
compiler does (natural alignment, padding included).  C enums are
``unsigned int`` here: GCC and Clang give an enum whose values are all
non-negative that type, and it has the size of ``int`` everywhere libvram
builds.  ``vram_handle`` (``intptr_t``) is ``c_ssize_t``, which has the size
of a pointer on every platform CPython supports.

Nothing here is public API: use :mod:`vram`.  ``PROTOTYPES`` lists every
function with its restype and argtypes; :func:`load` applies them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_size_t,
    c_ssize_t,
    c_uint,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _prototypes

__all__ = [
    "VRAM_KV_HOLD",
    "VRAM_STAGE_KEEP_WINDOW",
    "VRAM_WEIGHTS_KEY_BYTES",
    "VRAM_WEIGHTS_NAME_MAX",
    "VRAM_WEIGHTS_NOWAIT",
    "VRAM_WEIGHTS_KEEP",
    "VRAM_SLEEP_DISCARD_KV",
    "VRAM_SLEEP_DISCARD_EXPERTS",
    "VRAM_WAKE_KEEP_HOST",
    "PROTOTYPES",
    "STRUCTS",
    "load",
    "library_path",
    "vram_client",
    "vram_client_p",
    "vram_event",
    "vram_event_fn",
    "vram_client_options",
    "vram_device_info",
    "vram_region_info",
    "vram_stage_info",
    "vram_kv_result",
    "vram_residency",
    "vram_weights_info",
    "vram_weights_entry",
]

# ---- constants of vram.h -------------------------------------------------

VRAM_KV_HOLD = 1
VRAM_PENDING = 1  # a background call sent its request (vram.h)
VRAM_STAGE_KEEP_WINDOW = 1
VRAM_WEIGHTS_KEY_BYTES = 32
VRAM_WEIGHTS_NAME_MAX = 64
VRAM_WEIGHTS_NOWAIT = 0x1
VRAM_WEIGHTS_KEEP = 0x2
VRAM_SLEEP_DISCARD_KV = 0x1
VRAM_SLEEP_DISCARD_EXPERTS = 0x2
VRAM_WAKE_KEEP_HOST = 0x1

# enum vram_region_kind, enum vram_event_type: see vram.types for the enums.
c_enum = c_uint
vram_handle = c_ssize_t


# ---- structs ---------------------------------------------------------------


class vram_client(Structure):
    """The opaque ``vram_client``; only pointers to it are used."""


vram_client_p = POINTER(vram_client)


class vram_event(Structure):
    """``struct vram_event``."""

    _fields_ = [
        ("type", c_enum),  # enum vram_event_type
        ("stage", c_uint32),
        ("residency_version", c_uint64),
        ("expert_slots_backed", c_uint32),
        ("expert_loaned_bytes", c_uint64),
        ("nchunks", c_uint32),
        ("deadline_ms", c_uint32),
        ("lost_chunks", c_uint32),
        ("slot_first", c_uint32),
        ("slot_end", c_uint32),
        ("chunks", POINTER(c_uint64)),  # const uint64_t *
    ]


# typedef void (*vram_event_fn)(void *user, const struct vram_event *ev);
vram_event_fn = CFUNCTYPE(None, c_void_p, POINTER(vram_event))


class vram_client_options(Structure):
    """``struct vram_client_options``."""

    _fields_ = [
        ("name", c_char_p),  # const char *
        ("ctl", c_int),
        ("timeout_ms", c_int),
        ("peer_access", c_int),
        ("error", c_char_p),  # char *, a buffer of error_len bytes
        ("error_len", c_size_t),
        ("reconnect_ms", c_int),
    ]


class vram_device_info(Structure):
    """``struct vram_device_info``."""

    _fields_ = [
        ("id", c_uint32),
        ("backend", c_char * 16),
        ("name", c_char * 96),
        ("uuid", c_char * 48),
        ("chunk_bytes", c_uint64),
        ("capacity_bytes", c_uint64),
        ("free_bytes", c_uint64),
        ("granted_bytes", c_uint64),
        ("loaned_bytes", c_uint64),
        ("total_bytes", c_uint64),
    ]


class vram_region_info(Structure):
    """``struct vram_region_info``."""

    _fields_ = [
        ("id", c_uint32),
        ("stage", c_uint32),
        ("device", c_uint32),
        ("kind", c_enum),  # enum vram_region_kind
        ("base", c_void_p),
        ("lane_stride", c_uint64),
        ("lanes", c_uint32),
        ("lane_slots", c_uint32),
        ("chunk_bytes", c_uint64),
        ("mapped", c_uint32),
    ]


class vram_stage_info(Structure):
    """``struct vram_stage_info``."""

    _fields_ = [
        ("stage", c_uint32),
        ("device", c_uint32),
        ("first_layer", c_uint32),
        ("last_layer", c_uint32),
        ("kv_region", c_uint32),
        ("expert_region", c_uint32),
        ("kv_mapped_bytes", c_uint64),
        ("kv_max_bytes", c_uint64),
        ("expert_loaned_bytes", c_uint64),
        ("expert_slots_backed", c_uint32),
        ("expert_slot_bytes", c_uint64),
    ]


class vram_kv_result(Structure):
    """``struct vram_kv_result``."""

    _fields_ = [
        ("kv_needed_bytes", c_uint64),
        ("kv_mapped_bytes", c_uint64),
        ("expert_loaned_bytes", c_uint64),
        ("expert_slots_backed", c_uint32),
        ("recalled_chunks", c_uint32),
    ]


class vram_residency(Structure):
    """``struct vram_residency``."""

    _fields_ = [
        ("version", c_uint64),
        ("expert_slots_backed", c_uint32),
        ("expert_loaned_bytes", c_uint64),
    ]


class vram_weights_info(Structure):
    """``struct vram_weights_info``."""

    _fields_ = [
        ("id", c_uint32),
        ("device", c_uint32),
        ("base", c_uint64),
        ("bytes", c_uint64),
        ("alloc_bytes", c_uint64),
        ("allocs", c_uint32),
        ("writer", ctypes.c_uint8),
        ("sealed", ctypes.c_uint8),
    ]


class vram_weights_entry(Structure):
    """``struct vram_weights_entry`` (``vram_weights_list``)."""

    _fields_ = [
        ("id", c_uint32),
        ("device", c_uint32),
        ("name", c_char * 65),
        ("key", ctypes.c_uint8 * 32),
        ("bytes", c_uint64),
        ("alloc_bytes", c_uint64),
        ("allocs", c_uint32),
        ("state", c_enum),
        ("writer", c_uint32),
        ("users", c_uint32),
        ("owner_uid", c_uint32),
        ("keep", ctypes.c_uint8),
        ("created_ms", c_uint64),
        ("sealed_ms", c_uint64),
        ("last_use_ms", c_uint64),
    ]


#: Every struct of vram.h, by its C name (the layout test compares them
#: with the compiler's offsetof and sizeof).
STRUCTS: Dict[str, Any] = {
    "vram_event": vram_event,
    "vram_client_options": vram_client_options,
    "vram_device_info": vram_device_info,
    "vram_region_info": vram_region_info,
    "vram_stage_info": vram_stage_info,
    "vram_kv_result": vram_kv_result,
    "vram_residency": vram_residency,
    "vram_weights_info": vram_weights_info,
    "vram_weights_entry": vram_weights_entry,
}

# ---- functions -----------------------------------------------------------

# c_uint8, c_enum and the rest, by these names, are what the generated table
# (_prototypes.py, from vram.h) refers to.
c_uint8 = ctypes.c_uint8

#: name -> (restype, argtypes), in vram.h's order: generated from vram.h by
#: python/gen_prototypes.py (the python_prototypes test checks it is current).
PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = _prototypes.table(
    sys.modules[__name__])

# ---- loading ---------------------------------------------------------------

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None


# The library's soname: what the loader and the Debian package know it by.
SONAME = "libvram.so.0"


def _recorded() -> Optional[str]:
    """The libvram that ``cmake --install`` (or the Debian package) put
    beside this package, as the install recorded it in ``vram/_install.py``;
    None for a package that was not installed that way (``pip install``)."""
    try:
        from . import _install  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_install, "LIBVRAM", None)


def _candidates() -> Sequence[str]:
    """Where libvram is looked for, in order: ``$VRAM_LIBRARY`` (or its
    older name ``$VRAM_LIB``), a copy beside this package (a wheel that
    carries it), the path recorded at install (so that an install to
    /usr/local works before ``ldconfig`` has run), then the loader's own
    search (``ldconfig``'s cache, ``LD_LIBRARY_PATH``)."""
    env = os.environ.get("VRAM_LIBRARY") or os.environ.get("VRAM_LIB")
    if env:
        return [env]  # asked for by name: nothing else may stand in
    out = []
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), SONAME)
    if os.path.exists(beside):
        out.append(beside)
    rec = _recorded()
    if rec:
        out.append(rec)
    found = ctypes.util.find_library("vram")
    if found:
        out.append(found)
    out.append(SONAME)
    return out


def load() -> ctypes.CDLL:
    """libvram, loaded once and with every prototype declared.

    Looked for where :func:`_candidates` says.  Raises ``OSError`` naming
    every place tried and why each failed.
    """
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        lib = None
        for name in _candidates():
            try:
                lib = ctypes.CDLL(name)
                _path = name
                break
            except OSError as e:
                tried.append(f"{name} ({e})")
        if lib is None:
            raise OSError(
                "cannot load libvram: tried " + "; ".join(tried)
                + " (set VRAM_LIBRARY to the path of libvram.so.0)")
        for fname, (restype, argtypes) in PROTOTYPES.items():
            try:
                f = getattr(lib, fname)
            except AttributeError as e:
                raise OSError(f"{_path} lacks {fname}: not the libvram this "
                              "package binds") from e
            f.restype = restype
            f.argtypes = argtypes
        _lib = lib
        return lib


def library_path() -> Optional[str]:
    """The name libvram was loaded by, or None before :func:`load`."""
    return _path
