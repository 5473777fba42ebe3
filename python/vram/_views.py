# SPDX-License-Identifier: Apache-2.0
"""The memory views of a client, and what becomes of them when the memory
under them goes.

Why not a view straight over the region's address: libvram maps chunk slot
i of a region at a fixed address and, when the chunk goes (a trim, a
release, a RECALL or EXPERT_SHRINK, a close), puts the address back to an
inaccessible reservation.  A numpy array or torch tensor made over it
cannot be told (nothing in numpy or torch invalidates an array in place),
so touching it after would be a segmentation fault that kills the
interpreter.  And the library cannot be asked to wait: a RECALL's slots are
unmapped when the event callback returns, whatever views are left.

So on the host backend (Linux) every view maps the memory itself: the
chunks under it are mapped a second time, contiguously, at an address of
the view's own (``mremap`` with an old size of 0 duplicates a shared
mapping: the same pages, the same memory object, no copy), and the array is
made over that mapping.  The client keeps a record of each view; before the
memory leaves the process -- before the call that gives it back, inside the
event callback before the library unmaps -- the view's mapping is replaced
by private zero pages (``mmap`` MAP_FIXED over the view's own range, atomic
for anyone touching it).  A view whose memory went thus reads zeros, and
what is written to it stays in those pages; it never faults, and it never
keeps the memory
(vramd refuses to take back a chunk that is still mapped in the process,
and a host chunk's next grant is a fresh memory object: nothing of another
client can show through).  Its mapping is unmapped when the last array
over it is gone.

Views of a weight set (vram.weights) are recorded the same way, by the
set's id: the writer's, before the seal, map the set's memory again as
above; a sealed set's are a private copy-on-write mapping of its memory
objects (:func:`_private`), so that a write to one -- torch has no
read-only tensors -- copies a page instead of faulting on the set's
read-only mapping.

On the cuda backend (device memory; torch tensors at the fixed device
address, which CUDA graphs need) and where mremap is missing, views are
recorded and invalidated the same way but cannot be made safe from Python:
a kernel touching a tensor whose memory went fails with CUDA's
illegal-address error.

Nothing here is public API: see :class:`vram.Client`.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import platform
import sys
import threading
from typing import (Any, Callable, Dict, FrozenSet, Iterable, List, Optional,
                    Set, Tuple)

__all__ = ["View", "Views", "aliasing_available"]

_PROT_NONE = 0
_PROT_RW = 0x1 | 0x2
_MAP_SHARED = 0x01
_MAP_PRIVATE = 0x02
_MAP_FIXED = 0x10
_MAP_ANONYMOUS = 0x20
# MAP_NORESERVE is 0x4000 on the architectures below; elsewhere it is left
# out (it only spares commit accounting).
_MAP_NORESERVE = 0x4000 if platform.machine() in (
    "x86_64", "AMD64", "aarch64", "arm64", "riscv64", "i686", "i386") else 0
_MREMAP_MAYMOVE = 1
_MREMAP_FIXED = 2
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc: Any = None
_libc_lock = threading.Lock()


def _load_libc() -> Any:
    global _libc
    with _libc_lock:
        if _libc is None:
            libc: Any = False
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(None, use_errno=True)
                    libc.mmap.restype = ctypes.c_void_p
                    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.c_int, ctypes.c_int,
                                          ctypes.c_int, ctypes.c_long]
                    libc.mremap.restype = ctypes.c_void_p
                    libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_void_p]
                    libc.munmap.restype = ctypes.c_int
                    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
                except (OSError, AttributeError):
                    libc = False
            _libc = libc
        return _libc


def aliasing_available() -> bool:
    """Whether host views get mappings of their own (Linux: mremap)."""
    return bool(_load_libc())


class AliasError(OSError):
    """A view's own mapping could not be made (errno EINVAL: the memory at
    the source address is not a shared mapping any more: it went)."""


def _alias(chunk_addrs: List[int], chunk_bytes: int) -> int:
    """A new range of len(chunk_addrs) chunks, chunk i mapping the same
    memory as the (shared) mapping at chunk_addrs[i]."""
    libc = _load_libc()
    size = len(chunk_addrs) * chunk_bytes
    base = libc.mmap(None, size, _PROT_NONE,
                     _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        e = ctypes.get_errno()
        raise AliasError(e, f"cannot reserve {size} bytes for a view: "
                            f"{os.strerror(e)}")
    for i, src in enumerate(chunk_addrs):
        dst = base + i * chunk_bytes
        r = libc.mremap(src, 0, chunk_bytes, _MREMAP_MAYMOVE | _MREMAP_FIXED,
                        dst)
        if r in (None, _MAP_FAILED) or r != dst:
            e = ctypes.get_errno() or _errno.EINVAL
            libc.munmap(base, size)
            raise AliasError(e, f"cannot map chunk slot 0x{src:x} again for a "
                                f"view: {os.strerror(e)}")
    return base


def _private(fds: List[int], each: int) -> int:
    """A new range of len(fds) pieces of each bytes, piece i a private
    (copy-on-write) mapping of the memory object fds[i]: reads show its
    bytes, a write copies the page it touches into this process's own
    memory and never reaches the object.  What a sealed weight set's host
    views are made over: a write to them cannot fault (torch has no
    read-only tensors), and cannot change the set."""
    libc = _load_libc()
    size = len(fds) * each
    base = libc.mmap(None, size, _PROT_NONE,
                     _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        e = ctypes.get_errno()
        raise AliasError(e, f"cannot reserve {size} bytes for a view: "
                            f"{os.strerror(e)}")
    for i, fd in enumerate(fds):
        dst = base + i * each
        r = libc.mmap(dst, each, _PROT_RW,
                      _MAP_PRIVATE | _MAP_FIXED | _MAP_NORESERVE, fd, 0)
        if r in (None, _MAP_FAILED) or r != dst:
            e = ctypes.get_errno() or _errno.EINVAL
            libc.munmap(base, size)
            raise AliasError(e, f"cannot map a weight set's allocation "
                                f"privately for a view: {os.strerror(e)}")
    return base


def memory_objects(addrs: List[int], each: int) -> List[int]:
    """Descriptors of this process's own (opened read-only; the caller
    closes them) for the memory objects mapped at each of addrs, each
    object at least each bytes long.

    libvram keeps a host weight set's allocations open as memfds and maps
    them at the set's address; it does not hand them out, so they are
    found as the kernel shows them: the device and inode of the mapping at
    each address (/proc/self/maps), then the descriptor of this process
    that is that file (/proc/self/fd), opened anew through /proc (a
    descriptor of our own: libvram's may be closed meanwhile, ours is
    checked to be the same file).  AliasError ENOENT when one is not
    found."""
    want = {a: None for a in addrs}  # type: Dict[int, Optional[Tuple[int, int]]]
    with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 5:
                continue
            start = int(parts[0].split("-", 1)[0], 16)
            if start in want:
                major, minor = (int(x, 16) for x in parts[3].split(":"))
                want[start] = (os.makedev(major, minor), int(parts[4]))
    missing = [a for a, ident in want.items() if ident is None or ident[1] == 0]
    if missing:
        raise AliasError(_errno.ENOENT, "no memory object is mapped at "
                         f"0x{missing[0]:x}: the weight set is not mapped here")
    found: Dict[Tuple[int, int], str] = {}
    idents = set(want.values())
    for name in os.listdir("/proc/self/fd"):
        path = f"/proc/self/fd/{name}"
        try:
            if not os.readlink(path).startswith("/memfd:"):
                continue
            st = os.stat(path)
        except OSError:  # closed meanwhile (the listing's own fd among them)
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in idents:
            found.setdefault(ident, path)  # type: ignore[arg-type]
    out: List[int] = []
    try:
        for a in addrs:
            ident = want[a]
            path = found.get(ident)  # type: ignore[arg-type]
            fd = -1
            if path is not None:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    fd = -1
            if fd >= 0:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != ident or st.st_size < each:
                    os.close(fd)
                    fd = -1
            if fd < 0:
                raise AliasError(_errno.ENOENT, "the memory object mapped at "
                                 f"0x{a:x} is not open in this process: no "
                                 "private view of it can be made")
            out.append(fd)
    except BaseException:
        for fd in out:
            os.close(fd)
        raise
    return out


def _scratch(base: int, size: int) -> bool:
    """Replaces [base, base + size) by private zero pages."""
    libc = _load_libc()
    r = libc.mmap(base, size, _PROT_RW,
                  _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_FIXED | _MAP_NORESERVE,
                  -1, 0)
    return r == base


# (region, lane, slot, chunk id) of each chunk slot a view covers.
Coord = Tuple[int, int, int, int]


class View:
    """The record of one view: what it covers and whether it is valid."""

    __slots__ = ("what", "stage", "region", "coords", "chunks", "addr", "size",
                 "alias", "wset", "valid", "reason", "__weakref__")

    def __init__(self, what: str, stage: Optional[int], region: Optional[int],
                 coords: List[Coord], addr: int, size: int,
                 alias: Optional[Tuple[int, int]],
                 wset: Optional[int] = None) -> None:
        self.what = what          # "lane_view(region 5, lane 0, slots 0..1)"
        self.stage = stage        # None for a view of a weight set
        self.region = region
        self.wset = wset          # the weight set's id, or None
        self.coords = tuple(coords)
        self.chunks: FrozenSet[int] = frozenset(c[3] for c in coords)
        self.addr = addr          # where the array starts
        self.size = size
        self.alias = alias        # (base, bytes) of its own mapping, or None
        self.valid = True
        self.reason = ""

    def covers(self, addr: int) -> bool:
        return self.addr <= addr < self.addr + max(self.size, 1)


class Views:
    """A client's views.  ``lock`` (re-entrant: a view's finaliser may run
    inside it) guards the records and ``gen``, which every invalidation
    increments: a view made from figures read before an invalidation is
    made again (see :meth:`add`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.gen = 0
        self.records: Set[View] = set()

    def add(self, gen: int, make: Callable[[], View]) -> Optional[View]:
        """make() under the lock and recorded, unless something was
        invalidated since gen was read (None: read the figures again)."""
        with self.lock:
            if self.gen != gen:
                return None
            v = make()
            self.records.add(v)
            return v

    def forget(self, v: View) -> None:
        """The last array over v is gone: its mapping goes too."""
        with self.lock:
            self.records.discard(v)
            alias, v.alias = v.alias, None
        if alias is not None:
            _load_libc().munmap(alias[0], alias[1])

    def invalidate(self, pred: Callable[[View], bool], reason: str) -> int:
        """Invalidates every valid view pred selects (its mapping becomes
        zero pages); returns how many."""
        n = 0
        with self.lock:
            self.gen += 1
            for v in list(self.records):
                if not v.valid or not pred(v):
                    continue
                v.valid = False
                v.reason = reason
                n += 1
                if v.alias is not None and not _scratch(*v.alias):
                    # Out of memory for zero pages: the view keeps the chunk
                    # mapped (vramd then refuses to take it back: EBUSY).
                    sys.unraisablehook(_Unraisable(
                        f"vram: cannot unmap the view {v.what} "
                        f"({os.strerror(ctypes.get_errno())})"))
        return n

    def revalidate(self, reason: str,
                   chunk_of: Callable[[int, int, int], Optional[int]]) -> int:
        """Makes valid again the views invalidated for reason that map no
        memory of their own (CUDA tensors over the chunks' addresses)
        whose every slot holds memory again, with the chunks it holds now
        (chunk_of(region, lane, slot), None when unmapped); returns how
        many.  A view with a mapping of its own stays invalid: zero pages
        took its place."""
        n = 0
        with self.lock:
            for v in list(self.records):
                if v.valid or v.reason != reason or v.alias is not None:
                    continue
                coords = []
                for region, lane, slot, _ in v.coords:
                    chunk = chunk_of(region, lane, slot)
                    if chunk is None:
                        break
                    coords.append((region, lane, slot, chunk))
                else:
                    v.coords = tuple(coords)
                    v.chunks = frozenset(c[3] for c in coords)
                    v.valid, v.reason = True, ""
                    n += 1
        return n

    def invalidate_chunks(self, chunks: Iterable[int], reason: str) -> int:
        ids = frozenset(chunks)
        if not ids:
            return 0
        return self.invalidate(lambda v: not v.chunks.isdisjoint(ids), reason)

    def valid_records(self) -> List[View]:
        with self.lock:
            return [v for v in self.records if v.valid]

    def find(self, addr: int, nbytes: int) -> List[View]:
        """The views whose memory holds [addr, addr + nbytes) (on the host
        backend one at most: each has a mapping of its own), else those
        that hold addr."""
        with self.lock:
            near = [v for v in self.records if v.covers(addr)]
        whole = [v for v in near if addr + nbytes <= v.addr + v.size]
        return whole or near


class _Unraisable:
    """A sys.UnraisableHookArgs-like object."""

    def __init__(self, msg: str) -> None:
        self.exc_type = RuntimeError
        self.exc_value = RuntimeError(msg)
        self.exc_traceback = None
        self.err_msg = "Exception ignored in vram"
        self.object = None


def extent(obj: Any) -> Tuple[int, int]:
    """(address, bytes) of a numpy array or torch tensor."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):
        return int(obj.data_ptr()), int(obj.numel() * obj.element_size())
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return int(ai["data"][0]), int(getattr(obj, "nbytes", 0))
    raise TypeError(f"{type(obj).__name__} is not a numpy array or torch "
                    "tensor")
