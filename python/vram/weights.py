# SPDX-License-Identifier: Apache-2.0
"""vram.Weights, a weight set opened by a Client, and vram.weights_key.

A weight set (vram.h, "weight sets") is a named set of large allocations on
one device that outlives the engine that wrote it: the first engine that
opens a name becomes its writer, fills it and seals it; every engine that
opens it after, with the same key, maps the same memory read-only, at the
same address, in milliseconds.  See :meth:`vram.Client.weights_open`.

Views (:meth:`Weights.array`, :meth:`Weights.tensor`) are recorded with the
client's other views (vram._views) and invalidated before the memory under
them goes: by :meth:`Weights.close`, by :meth:`Weights.seal` (views made
before the seal were writable) and by :meth:`vram.Client.close`.  What a
view of each kind is over:

=====================  ===============================  =====================
set                    host backend (Linux)             cuda backend
=====================  ===============================  =====================
being written (writer  the set's memory, mapped again    the set's device
before its seal)       at an address of the view's own   memory at its base
                       (shared: writes reach the set)    (tensors only)
sealed                 a private copy-on-write mapping   the same, read-only
                       of the set's memory at an         (a kernel's write
                       address of the view's own         fails with CUDA's
                                                         illegal-address
                                                         error)
=====================  ===============================  =====================

Why a private mapping for a sealed set on the host: its real mapping is
read-only (``PROT_READ`` over sealed memfds), and a write to it is a
SIGSEGV that kills the interpreter.  numpy can refuse writes (the arrays are
read-only, and cannot be made writable again), but torch has no read-only
tensors: ``t.add_(1)`` or ``t[0] = 0`` would be that SIGSEGV.  Over a
private mapping the same bytes are read without a copy, and a write copies
the page it touches into this process's own memory: it cannot fault, and
it cannot change the set that other processes share.  All the views of a
set in a process are slices of one mapping of it (made at the first view,
and again after the seal), so a view costs no system call.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import hashlib
import json
import math
import operator
import os
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Tuple

from . import _lib, _views
from ._args import checked, u64
from .errors import VramError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Weights", "weights_key", "KEY_BYTES", "NAME_MAX"]

#: A key's length in bytes (VRAM_WEIGHTS_KEY_BYTES).
KEY_BYTES = _lib.VRAM_WEIGHTS_KEY_BYTES
#: The longest name in bytes (VRAM_WEIGHTS_NAME_MAX).
NAME_MAX = _lib.VRAM_WEIGHTS_NAME_MAX


def _jsonable(o: Any) -> Any:
    """What json.dumps cannot write itself: integers that are not int
    (numpy's, torch.Size's members are int already) and dtypes."""
    if hasattr(o, "__index__"):
        return operator.index(o)
    if type(o).__module__.startswith(("torch", "numpy")):
        return str(o)
    raise TypeError(f"weights_key: {type(o).__name__} {o!r} has no JSON form "
                    "(use str, int, float, bool, None, lists and dicts)")


def weights_key(model: Any, dtype: Any, shapes: Any, split: Any = None) -> bytes:
    """The 32-byte key of a weight set's layout: SHA-256 of the canonical
    JSON of ``{"model": model, "dtype": dtype, "shapes": shapes, "split":
    split}`` (keys sorted, no spaces, ASCII).

    Everything that decides which bytes lie where in the set belongs in it:
    the model (a name and its revision, or the checkpoint's own hash), the
    dtype (a string, or a torch or numpy dtype: written as ``str(dtype)``,
    so ``"float32"`` and ``torch.float32`` ("torch.float32") give different
    keys: pick one), the shapes (say, a dict of tensor name -> shape, in the
    set's order when the order is the layout: a list of pairs) and the
    split (the stage's layers, the tensor-parallel rank).  The same
    description gives the same key in every process and Python version; an
    engine whose layout changed gets ESTALE from :meth:`Client.weights_open`
    instead of another layout's bytes.  Tuples are written as lists;
    integers that are not int (numpy's) as the int they stand for; anything
    else JSON has no form for raises TypeError."""
    desc = {"model": model, "dtype": dtype, "shapes": shapes, "split": split}
    text = json.dumps(desc, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False, default=_jsonable)
    return hashlib.sha256(text.encode("ascii")).digest()


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("vram tensors need PyTorch (pip install torch, "
                          "or Debian's python3-torch)") from e
    return torch


@checked
class Weights:
    """A weight set this client has open (``vram_weights_open``); made by
    :meth:`Client.weights_open`, a context manager that closes it.

    Attributes, as libvram gives them (``struct vram_weights_info``): ``id``,
    ``name``, ``device``, ``base`` (where the set is mapped, the same in
    every process; it never changes), ``nbytes`` (as opened),
    ``alloc_bytes`` and ``allocs`` (its allocations, mapped one after the
    other from ``base``), ``writer`` (this client writes it: read-write
    until :meth:`seal`) and ``sealed`` (read-only for everyone); ``closed``.

    Views: :meth:`array` (numpy, host backend) and :meth:`tensor` (torch:
    CPU on the host backend, CUDA on the cuda backend), zero-copy, by dtype,
    shape and byte offset.  A sealed set's views are read-only: numpy arrays
    with ``writeable`` False (which cannot be set True), and on the host
    torch tensors over a private copy-on-write mapping, so that a write to
    one changes only this process's copy of the pages it touches and never
    faults (torch has no read-only tensors; on cuda a kernel writing to a
    sealed set fails with CUDA's illegal-address error).  :meth:`close`,
    :meth:`seal` (for the writer's views made before it) and
    :meth:`Client.close` invalidate the views: an invalidated host view
    reads zeros and never faults; :meth:`Client.view_valid` and
    :meth:`Client.check_view` tell.  A view keeps its Client alive.
    """

    def __init__(self, client: Any, name: str, info: Any) -> None:
        """Not for use: :meth:`Client.weights_open` makes them."""
        self._client = client
        self.name = name
        self._closed = False
        self._map: Optional[_Mapping] = None  # see _mapping
        self._update(info)

    def _update(self, info: Any) -> None:
        self.id = int(info.id)
        self.device = int(info.device)
        self.base = int(info.base)
        self.nbytes = int(info.bytes)
        self.alloc_bytes = int(info.alloc_bytes)
        self.allocs = int(info.allocs)
        self.writer = bool(info.writer)
        self.sealed = bool(info.sealed)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or the client's close) ran."""
        return self._closed or self._client.closed

    @property
    def client(self) -> "Client":
        """The Client that opened it."""
        return self._client

    def __repr__(self) -> str:
        state = ("closed" if self.closed else "sealed" if self.sealed
                 else "writing" if self.writer else "open")
        return (f"<vram.Weights id={self.id} name={self.name!r} "
                f"device={self.device} nbytes={self.nbytes} {state}>")

    def __enter__(self) -> "Weights":
        """The set itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the set."""
        self.close()

    def _invalidate(self, reason: str) -> Callable[[Any], None]:
        """What runs before the set's memory changes under its views (a
        seal, a close), under the client's lock."""
        wid = self.id

        def before(h: Any) -> None:
            self._map = None  # the next view makes a mapping anew
            self._client._views.invalidate(lambda v: v.wset == wid, reason)

        return before

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise ValueError(f"vram.Weights.{what}: weight set '{self.name}' "
                             "is closed")

    # ---- the writer's seal, closing ---------------------------------------

    def seal(self) -> None:
        """The writer is done (``vram_weights_seal``): the set is read-only
        from now on, for every process that maps it, this one included, and
        other clients may open it.  The writer's views made before the seal
        were writable: they are invalidated first (read zeros from now on):
        make new ones after.  On cuda, wait for the kernels that write the
        set first (``torch.cuda.synchronize()``): the seal maps it again.
        VramError EPERM not its writer, EALREADY sealed already."""
        self._check_open("seal")
        before = (self._invalidate(f"seal() of weight set '{self.name}' (a "
                                   "view made before the seal was writable)")
                  if self.writer and not self.sealed else None)
        try:
            self._client._invoke("vram_weights_seal", self.id, before=before)
        finally:
            self._refresh()

    def _refresh(self) -> None:
        out = _lib.vram_weights_info()

        def read(h: Any) -> int:
            return int(self._client._lib.vram_weights_info(h, self.id, out))

        try:
            if self._client._locked(read) == 0:
                self._update(out)
        except ValueError:  # the client is closed
            pass

    def close(self) -> None:
        """Unmaps the set here (``vram_weights_close``), after invalidating
        every view of it.  A sealed set nobody maps stays cached on its
        device for the next engine (until memory is needed: least recently
        used first); one its writer closes before sealing is dropped.
        Idempotent; :meth:`Client.close` closes every set too."""
        if self.closed:
            self._closed = True
            return
        try:
            self._client._invoke("vram_weights_close", self.id,
                                 before=self._invalidate(
                                     f"close() of weight set '{self.name}'"))
        finally:
            # libvram unmapped it whatever the daemon answered.
            self._closed = True
            self._client._wsets.pop(self.id, None)

    # ---- views -------------------------------------------------------------

    def _extent(self, what: str, itemsize: int, shape: Optional[List[int]],
                offset: int) -> Tuple[Tuple[int, ...], int]:
        """(shape, bytes) of a view of itemsize items at offset, or raises
        ValueError."""
        if offset % itemsize:
            raise ValueError(f"{what}: offset={offset} is not a multiple of "
                             f"the item size ({itemsize} bytes)")
        if offset >= self.nbytes:
            raise ValueError(f"{what}: offset={offset} is past the set's "
                             f"{self.nbytes} bytes")
        if shape is None:
            rest = self.nbytes - offset
            if rest % itemsize:
                raise ValueError(f"{what}: the {rest} bytes from offset "
                                 f"{offset} are not a whole number of "
                                 f"{itemsize}-byte items: give a shape")
            dims: Tuple[int, ...] = (rest // itemsize,)
        else:
            dims = tuple(shape)
        size = math.prod(dims) * itemsize
        if size == 0:
            raise ValueError(f"{what}: shape {dims} covers no bytes")
        if offset + size > self.nbytes:
            raise ValueError(f"{what}: {size} bytes from offset {offset} go "
                             f"past the set's {self.nbytes} bytes")
        return dims, size

    def _mode(self, call: str, torch_view: bool) -> str:
        """How views are made now: at the set's own address ("direct"), its
        memory mapped again ("shared": writable while it is written) or a
        private copy-on-write mapping of it ("private": sealed)."""
        if self._client.backend != "host":
            return "direct"
        if not _views.aliasing_available():
            if self.sealed and torch_view:
                raise NotImplementedError(
                    f"vram.Weights.{call}: a torch tensor over a sealed set "
                    "on the host backend needs a private mapping of its own, "
                    "which only Linux gives here (a write to the set's "
                    "read-only mapping would kill the interpreter): use "
                    "array(), a read-only numpy array")
            return "direct"
        return "private" if self.sealed else "shared"

    def _mapping(self, call: str, torch_view: bool) -> "_Mapping":
        """The set's memory as views see it now, made on the first view
        after the open or the seal: one record (vram._views) for the whole
        set, whose views are slices of one array or tensor over it, so that
        a view costs no system call.  Made under the client's lock, from
        the set's state as libvram has it then, so that no seal or close
        runs meanwhile."""
        c = self._client

        def locked(h: Any) -> _Mapping:
            self._check_open(call)
            out = _lib.vram_weights_info()
            if c._lib.vram_weights_info(h, self.id, out) < 0:
                self._closed = True  # closed meanwhile (on another thread)
                self._check_open(call)
            self._update(out)
            mode = self._mode(call, torch_view)
            m = self._map
            if (m is not None and m.rec.valid and m.mode == mode
                    and m.sealed == self.sealed):
                return m
            ab, n = self.alloc_bytes, self.allocs
            addrs = [self.base + i * ab for i in range(n)]
            what = f"a view of weight set '{self.name}'"

            def make() -> _views.View:
                if mode == "direct":
                    return _views.View(what, None, None, [], self.base, self.nbytes,
                                       None, wset=self.id)
                if mode == "shared":
                    base = _views._alias(addrs, ab)
                else:
                    fds = _views.memory_objects(addrs, ab)
                    try:
                        base = _views._private(fds, ab)
                    finally:
                        for fd in fds:
                            os.close(fd)
                return _views.View(what, None, None, [], base, self.nbytes,
                                   (base, n * ab), wset=self.id)

            for _ in range(64):
                try:
                    rec = c._views.add(c._views.gen, make)
                except _views.AliasError as e:
                    raise VramError(e.errno or _errno.EIO, str(e),
                                    call=f"Weights.{call}") from None
                if rec is not None:
                    self._map = _Mapping(c, rec, mode, self.sealed,
                                         c.backend == "host")
                    return self._map
            raise VramError(_errno.EAGAIN, "views kept being invalidated while "
                            "this one was made: try again", call=f"Weights.{call}")

        return c._locked(locked)

    def array(self, dtype: Any = "uint8", shape: Optional[Iterable[u64]] = None,
              offset: u64 = 0) -> Any:
        """A numpy array over the set's bytes from offset, zero-copy (host
        backend): dtype items, as shape (None: every whole item from offset
        to the end of the set, one dimension).

        The writer's array before the seal is writable and writes the set;
        once sealed, arrays are read-only (a write raises ValueError, and
        ``writeable`` cannot be set True).  offset must be a multiple of the
        item size, and the array must lie within the set's ``nbytes``
        (ValueError).  Invalidated by :meth:`close`, :meth:`seal` and the
        client's close: it then reads zeros and never faults.  Raises
        NotImplementedError on the cuda backend (use :meth:`tensor`),
        ImportError without numpy."""
        c = self._client
        self._check_open("array")
        if c.backend != "host":
            raise NotImplementedError(
                f"vram.Weights.array: the {c.backend} backend's weight sets "
                "are device memory, not readable by the CPU: use tensor()")
        from .client import _numpy
        np = _numpy()
        dt = np.dtype(dtype)
        dims, size = self._extent("Weights.array", dt.itemsize,
                                  None if shape is None else list(shape), offset)
        whole = self._mapping("array", False).array(np)
        return whole[offset:offset + size].view(dt).reshape(dims)

    def tensor(self, dtype: Any = None, shape: Optional[Iterable[u64]] = None,
               offset: u64 = 0) -> Any:
        """A torch tensor over the set's bytes from offset, zero-copy:
        dtype (default torch.uint8) items, as shape (None: every whole item
        to the end of the set, one dimension).

        On the cuda backend a CUDA tensor at the set's own device address
        (``base + offset``, the same in every process, so CUDA graphs
        captured over it replay in the next engine too); read-only once
        sealed: a kernel writing to it fails with CUDA's illegal-address
        error (the CUDA context is lost). On the host backend a CPU tensor
        over a mapping of its own: the writer's, before the seal, writes
        the set; once sealed, it is a private copy-on-write mapping of the
        set's memory -- torch has no read-only tensors, so a write to it
        does not fault: it changes this process's own copy of the pages it
        touches (which this process's other views of the set show too,
        until the set is closed here), never the set: other processes, and
        this one after it opens the set again, see the set's bytes.  Don't
        write to it: it is the set's memory only as long as you do not.

        The same checks as :meth:`array`; invalidated the same way (on
        cuda an invalidated tensor points at unmapped device memory).
        ImportError without torch."""
        torch = _torch()
        self._check_open("tensor")
        dtype = dtype if dtype is not None else torch.uint8
        itemsize = torch.empty((), dtype=dtype).element_size()
        dims, size = self._extent("Weights.tensor", itemsize,
                                  None if shape is None else list(shape), offset)
        whole = self._mapping("tensor", True).tensor(torch)
        return whole[offset:offset + size].view(dtype).view(dims)


class _Mapping:
    """A weight set's memory as this process's views see it: its record
    (vram._views.View, for the whole set) and, made on first use, the
    arrays and tensors over all of it that every view is a slice of.  They
    hold the memory's holder (a ctypes buffer on the host, a
    __cuda_array_interface__ span on cuda), whose finaliser forgets the
    record (and unmaps its mapping) once the last view is gone."""

    __slots__ = ("client", "rec", "mode", "sealed", "host", "holder", "_np", "_t")

    def __init__(self, client: Any, rec: _views.View, mode: str, sealed: bool,
                 host: bool) -> None:
        self.client, self.rec, self.mode = client, rec, mode
        self.sealed, self.host = sealed, host
        self._np: Any = None
        self._t: Any = None
        if host:
            buf = (ctypes.c_ubyte * rec.size).from_address(rec.addr)
            buf._vram_owner = client  # the client stays alive under a view
            self.holder: Any = buf
        else:
            from .client import _CudaSpan
            self.holder = _CudaSpan(rec.addr, rec.size, client)
        # Not at interpreter exit, while views over it may still be touched.
        weakref.finalize(self.holder, client._views.forget, rec).atexit = False

    def array(self, np: Any) -> Any:
        """uint8 over the whole set: read-only (and not to be made writable
        again: its buffer is read-only) when the set is sealed."""
        if self._np is None:
            src = memoryview(self.holder)
            self._np = np.frombuffer(src.toreadonly() if self.sealed else src,
                                     dtype=np.uint8)
        return self._np

    def tensor(self, torch: Any) -> Any:
        """torch.uint8 over the whole set (host: over a writable array of
        the same memory, copy-on-write when sealed; cuda: the device
        memory)."""
        if self._t is None:
            if self.host:
                from .client import _numpy
                np = _numpy()
                self._t = torch.from_numpy(np.frombuffer(self.holder, dtype=np.uint8))
            else:
                self._t = torch.as_tensor(self.holder, device="cuda")
        return self._t


def _key_bytes(key: Any) -> bytes:
    """A key argument as its 32 bytes, or TypeError / ValueError."""
    if isinstance(key, str):
        raise TypeError("weights_open: key must be 32 bytes (vram.weights_key "
                        "makes one), not a str")
    try:
        b = bytes(memoryview(key))
    except TypeError:
        raise TypeError("weights_open: key must be 32 bytes (bytes, bytearray "
                        f"or a buffer), not {type(key).__name__}") from None
    if len(b) != KEY_BYTES:
        raise ValueError(f"weights_open: key is {len(b)} bytes, not "
                         f"{KEY_BYTES} (vram.weights_key makes one)")
    return b

