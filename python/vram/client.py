# SPDX-License-Identifier: Apache-2.0
"""vram.Client: one connection to vramd, over libvram."""

from __future__ import annotations

import atexit
import ctypes
import errno as _errno
import json
import os
import sys
import threading
import weakref
from ctypes import POINTER, byref, c_char, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

from . import _lib, _views
from ._args import checked, handle, i32, ms, u32, u64
from .errors import VramError
from .weights import Weights, _key_bytes
from .types import (
    DeviceInfo,
    Event,
    KvResult,
    RegionInfo,
    RegionKind,
    Residency,
    StageInfo,
)

__all__ = ["Client", "EventHandler"]

#: What an event handler is: it gets each :class:`Event`, returns nothing.
EventHandler = Callable[[Event], None]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_ERROR_BUFFER = 1024


def _c_text(value: Optional[Union[str, bytes]], what: str) -> Optional[bytes]:
    """A C string argument; a NUL inside would cut it short in C."""
    if value is None:
        return None
    b = value.encode() if isinstance(value, str) else bytes(value)
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL byte (C would cut it there): "
                         f"{value!r}")
    return b

# Per thread: the clients whose event callback runs on this thread now (a
# stack, innermost last).  Calls a callback makes into its own client skip
# the client's Python lock (the library holds the client's own lock around
# the callback, or the calling thread is inside a call already), and a
# client dropped inside a callback is closed on another thread.
_cb_tls = threading.local()


def _callback_stack() -> List[int]:
    st = getattr(_cb_tls, "stack", None)
    if st is None:
        st = _cb_tls.stack = []
    return st


# Clients still open, closed at interpreter exit: an event thread must not
# call into an interpreter that is finalising.
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for c in list(_open_clients):
        try:
            c.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


def _close_handle(lib: Any, handle: Any, keep: Any) -> None:
    """vram_client_close on a thread of its own (a client dropped inside an
    event callback); keep is the ctypes callback, alive until it is done."""
    lib.vram_client_close(handle)
    del keep


def _decode(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


def _numpy() -> Any:
    """numpy, imported on first use of a view."""
    try:
        import numpy
    except ImportError as e:
        raise ImportError(
            "vram's memory views (lane_view, expert_slot_view) need numpy, "
            "which is not installed (Debian: apt-get install python3-numpy; "
            "otherwise pip install numpy); the rest of vram works without it"
        ) from e
    return numpy


def _make_trampoline(ref: "weakref.ReferenceType[Client]") -> Callable[..., None]:
    """The C callback: finds the client through a weak reference (no
    cycle, so a dropped client is collected and closed) and delivers."""

    def trampoline(user: Any, evp: Any) -> None:
        try:
            client = ref()
            if client is None:
                return
            stack = _callback_stack()
            stack.append(id(client))
            try:
                client._deliver(evp)
            finally:
                # The last reference may go here: __del__ then sees that
                # it runs inside a callback and closes on another thread.
                client = None
                stack.pop()
        except BaseException:  # nothing may unwind into C
            try:
                sys.unraisablehook(_unraisable(sys.exc_info()[1],
                                               "vram event trampoline"))
            except BaseException:
                pass

    return trampoline


def _unraisable(exc: Optional[BaseException], where: str) -> Any:
    """A sys.UnraisableHookArgs-like object for sys.unraisablehook."""

    class _Args:
        exc_type = type(exc)
        exc_value = exc
        exc_traceback = exc.__traceback__ if exc is not None else None
        err_msg = f"Exception ignored in {where}"
        object = None

    return _Args()


class _CudaSpan:
    """Device memory handed to torch through __cuda_array_interface__ (a
    flat byte array); it keeps the client alive while a tensor uses it."""

    def __init__(self, addr: int, nbytes: int, owner: "Client") -> None:
        self._owner = owner
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (addr, False),
            "version": 3, "strides": None}


@checked
class Client:
    """One connection to vramd (``vram_client``); a context manager.

    ``Client(path)`` connects at once (``vram_client_connect``) and maps
    nothing yet.  ``path`` None means ``$VRAM_SOCKET``, else
    ``/run/vramd/vramd.sock``.  A failed connect raises :class:`VramError`
    whose ``errno`` is the code (ENOENT or ECONNREFUSED: no vramd listens
    there; EACCES; E2BIG; EPROTONOSUPPORT; ENODEV) and whose ``message`` is
    the library's error text, which names the socket.

    Options (``struct vram_client_options``): ``name`` as vramctl shows it
    (default "pid-N"); ``timeout_ms`` per request (0: 30000);
    ``reconnect_ms`` how long to keep connecting again after the connection
    breaks (0: 30000 for engines, never for control clients; -1: never);
    ``ctl`` a control client (vramctl); ``peer_access`` (cuda) map chunks
    for peer GPUs too.

    **Errors.**  Every libvram call that returns a negative errno raises
    :class:`VramError` (``e.errno`` positive, ``e.message`` the daemon's
    words, ``str(e)`` with vramd's meaning of the code too).  Calls on a
    closed client raise ``ValueError``, as for a closed file.

    **Integer arguments** are checked before anything is sent or mapped
    (ctypes would take them modulo 2**32 or 2**64): each is annotated with
    its C range -- ``u32`` (ids, lanes, slots, layers, chunk counts),
    ``u64`` (tokens, bytes), ``i32``, ``ms`` (0..2**31-1), ``handle`` -- and
    a bad one raises ``TypeError`` (not an integer; a ``bool`` is refused
    too), ``ValueError`` (negative for an unsigned type) or
    ``OverflowError`` (too large), naming the call, the argument and the
    range: ``stage_register: stage=4294967296 is out of range for u32
    (0..4294967295)``.  Integers that are not ``int`` (numpy's, IntEnum
    members) pass as the value ``operator.index`` gives.  The flags a call
    takes (``hold``, ``keep_window``, ``on``, ``ctl``) are ``bool``
    parameters of their own and take any truth value.

    **Events.**  ``on_event`` (an argument, or the attribute set later) is
    called with an :class:`Event` for every event the library delivers:
    inside the blocking call that read it, inside :meth:`dispatch`, or on
    the library's event thread (:meth:`start_event_thread`).  The library's
    state is already the state after the change, so :meth:`expert_residency`
    and :meth:`stage_info` called from the handler return the figures the
    event announces.  For RECALL and EXPERT_SHRINK the slots
    ``[slot_first, slot_end)`` lose their memory when the handler returns:
    stop using them (and any view over them) first.  The handler may call
    into its own client (not into another one) and must not close it.

    **Exceptions in the handler.**  An exception raised by the handler
    never unwinds through C: it is caught and kept, the handler counts as
    returned (for a RECALL the library then unmaps and answers as usual),
    and the exception is re-raised from the Client method that delivered
    the event, after the underlying C call returned -- so the call's effect
    has taken place (read the state with :meth:`stage_info`).  If that call
    failed too, its :class:`VramError` is the exception's ``__context__``.
    Events delivered on the event thread have no such call: their
    exception is raised by the next method called on this client, on any
    thread.  When several handlers raise before it is raised, the first
    is raised and the others go to ``sys.unraisablehook``, as do any still
    kept when the client is closed.

    **Threads.**  Like a ``vram_client`` a Client is used by one thread at a
    time; calls from several threads are serialised here so that each
    call's error message is its own.  Once :meth:`start_event_thread` ran,
    the handler runs on the library's thread.

    **Memory views.**  :meth:`lane_view` and :meth:`expert_slot_view` give
    numpy arrays over mapped memory (host backend), :meth:`lane_tensor` and
    :meth:`expert_slot_tensor` torch tensors.  A view never stops memory
    from going: the daemon's RECALL cannot wait, and an engine may hold a
    tensor across a trim.  Instead, when the memory under a view goes, the
    view is *invalidated*, before the memory leaves: by :meth:`kv_trim`
    (views over KV beyond the stage's initial window), :meth:`region_shrink`,
    :meth:`region_release`, :meth:`region_move_chunk` (the old slot),
    :meth:`stage_release`, :meth:`close`, and by a RECALL, EXPERT_SHRINK or
    STAGE_LOST once the handler returned (or a reconnect that lost chunks).
    On the host backend (Linux) each view maps the memory itself, at an
    address of its own (not the region's), and invalidating it replaces
    that mapping by private zero pages: an invalidated view reads zeros,
    what is written to it stays in those pages and reaches no memory of
    vramd's, and it never faults.  :meth:`view_valid` says whether a view
    (or a slice of one) is still good; :meth:`check_view` raises VramError
    ESTALE naming what took the memory.  Make views again after the memory
    came back (a view, once invalidated, stays so).  On the cuda backend
    tensors are at the region's fixed device address (CUDA graphs need
    it): they are invalidated the same way, but a kernel touching an
    invalidated one fails with CUDA's illegal-address error.  Holding
    views is free; using one whose memory went is the bug, and
    ``check_view`` finds it.  A view keeps its Client alive (it is never
    closed by garbage collection under a view).

    **Weight sets.**  :meth:`weights_open` gives a :class:`Weights`: the
    first engine to open a name writes the set and seals it, every engine
    after it maps the same memory read-only.  Its views (``array``,
    ``tensor``) are recorded with the others and invalidated by the set's
    close, by its seal (the writer's views made before it) and by this
    client's close; a sealed set's views are read-only (see
    :class:`Weights`).
    """

    def __init__(self, path: Optional[PathLike] = None, name: Optional[str] = None,
                 timeout_ms: ms = 0, reconnect_ms: i32 = 0, ctl: bool = False,
                 *, peer_access: bool = False,
                 on_event: Optional[EventHandler] = None) -> None:
        """Connects to vramd (see the class documentation)."""
        self._setup(on_event)
        self._connect("vram_client_connect",
                      None if path is None else _c_text(os.fsencode(path), "path"),
                      name, timeout_ms, reconnect_ms, ctl, peer_access)

    @classmethod
    def from_fd(cls, fd: handle, name: Optional[str] = None, timeout_ms: ms = 0,
                reconnect_ms: i32 = 0, ctl: bool = False, *,
                peer_access: bool = False,
                on_event: Optional[EventHandler] = None) -> "Client":
        """A Client over an already connected socket
        (``vram_client_connect_fd``): it takes ownership of fd, which is
        closed on failure too."""
        self = cls.__new__(cls)
        self._setup(on_event)
        self._connect("vram_client_connect_fd", int(fd), name, timeout_ms,
                      reconnect_ms, ctl, peer_access)
        return self

    # ---- set-up and teardown ----------------------------------------------

    def _setup(self, on_event: Optional[EventHandler]) -> None:
        self._handle: Any = None
        self._lib = _lib.load()
        self._on_event = on_event
        self._pending: List[BaseException] = []
        self._pending_lock = threading.Lock()
        self._call_lock = threading.Lock()
        self._cb: Any = None
        # The views handed out (vram._views), and per configured stage the
        # KV a trim never gives back: (kv region, mapped slots per lane
        # right after registration), None with keep_window.
        self._views = _views.Views()
        # Background kv_reserve results not read yet, by stage (PendingKvResult).
        self._pending_kv: Dict[int, "PendingKvResult"] = {}
        self._kv_floor: Dict[int, Optional[Tuple[int, List[int]]]] = {}
        # The weight sets open here, by id (weakly: a set stays open in
        # libvram when its object goes, and weights_open gives a new one).
        self._wsets: "weakref.WeakValueDictionary[int, Weights]" = \
            weakref.WeakValueDictionary()
        # The sets stage_weights gave out, by stage (stage_release closes
        # them).
        self._stage_wsets: Dict[int, Set[int]] = {}

    def _connect(self, fname: str, where: Any, name: Optional[str],
                 timeout_ms: int, reconnect_ms: int, ctl: bool,
                 peer_access: bool) -> None:
        err = ctypes.create_string_buffer(_ERROR_BUFFER)
        name_b = _c_text(name, "name")
        opt = _lib.vram_client_options(
            name=name_b, ctl=1 if ctl else 0, timeout_ms=int(timeout_ms),
            peer_access=1 if peer_access else 0,
            error=ctypes.cast(err, ctypes.c_char_p), error_len=len(err),
            reconnect_ms=int(reconnect_ms))
        out = _lib.vram_client_p()
        rc = getattr(self._lib, fname)(where, byref(opt), byref(out))
        if rc < 0:
            raise VramError(rc, _decode(err.value), call=fname)
        self._handle = out
        # The callback object lives as long as the client (self._cb): the
        # library keeps only its address.
        self._cb = _lib.vram_event_fn(_make_trampoline(weakref.ref(self)))
        self._lib.vram_client_set_event_callback(out, self._cb, None)
        _open_clients.add(self)

    def close(self) -> None:
        """Releases the client's stages (their memory goes back to vramd at
        once; every view over it is invalidated first: see "Memory views"),
        closes its weight sets (a sealed one stays cached in vramd, one not
        sealed yet is dropped), disconnects and frees the client
        (``vram_client_close``).
        Idempotent.  Not from the client's own event handler
        (``RuntimeError``)."""
        if id(self) in _callback_stack():
            raise RuntimeError("vram.Client.close() from its own event "
                               "callback is not allowed (vram.h)")
        with self._call_lock:
            h = self._handle
            if h is None:
                return
            self._handle = None
            self._views.invalidate(lambda v: True, "close()")
            self._lib.vram_client_close(h)
        _open_clients.discard(self)
        with self._pending_lock:
            left, self._pending = self._pending, []
        for exc in left:
            sys.unraisablehook(_unraisable(exc, "a vram event callback "
                                                "(never raised: the client "
                                                "was closed)"))

    def __enter__(self) -> "Client":
        """The client itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the client."""
        self.close()

    def __del__(self) -> None:
        h = getattr(self, "_handle", None)
        if h is None:
            return
        self._handle = None
        try:
            views = getattr(self, "_views", None)
            if views is not None:
                views.invalidate(lambda v: True, "the client's garbage collection")
            if _callback_stack():
                # Dropped inside an event callback: vram_client_close may not
                # run here (it would wait for this very callback).
                threading.Thread(target=_close_handle,
                                 args=(self._lib, h, self._cb),
                                 daemon=True).start()
            else:
                self._lib.vram_client_close(h)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "<vram.Client closed>"
        return f"<vram.Client id={self.id} backend={self.backend!r}>"

    # ---- calling ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or the connect failed)."""
        return self._handle is None

    def _h(self) -> Any:
        h = self._handle
        if h is None:
            raise ValueError("operation on a closed vram.Client")
        return h

    def _invoke(self, fname: str, *args: Any, daemon_message: bool = True,
                message: Optional[str] = None, check: bool = True,
                before: Optional[Callable[[Any], None]] = None) -> Any:
        """Calls fname(client, *args).  With check, a negative result raises
        VramError: message when given, else the library's last error (for
        calls that set it: daemon_message), else vram_strerror.  before(h)
        runs first, under the same lock (it invalidates the views over
        memory the call gives back)."""
        f = getattr(self._lib, fname)
        own_callback = id(self) in _callback_stack()
        if not own_callback:
            self._call_lock.acquire()
        try:
            h = self._h()
            if before is not None:
                before(h)
            rc = f(h, *args)
            err = None
            if check and rc < 0:
                text = message
                if text is None and daemon_message:
                    text = _decode(self._lib.vram_client_last_error(self._handle))
                err = VramError(rc, text or "", call=fname)
        finally:
            if not own_callback:
                self._call_lock.release()
        self._raise_pending(err)
        if err is not None:
            raise err
        return rc

    def _keep(self, exc: BaseException) -> None:
        with self._pending_lock:
            self._pending.append(exc)

    def _raise_pending(self, err: Optional[BaseException]) -> None:
        """Raises the first exception an event handler raised (the others go
        to sys.unraisablehook), with err as its context."""
        if not self._pending:
            return
        with self._pending_lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        first = pending[0]
        for exc in pending[1:]:
            sys.unraisablehook(_unraisable(exc, "a vram event callback (an "
                                                "earlier one's exception is "
                                                "raised)"))
        if err is not None and first.__context__ is None:
            first.__context__ = err
        raise first

    def _locked(self, fn: Callable[[Any], Any]) -> Any:
        """fn(handle) under the call lock (not taken inside this client's
        own callback), for raw library calls."""
        if id(self) in _callback_stack():
            return fn(self._h())
        with self._call_lock:
            return fn(self._h())

    def _deliver(self, evp: Any) -> None:
        """Runs the handler for one event (keeping what it raises), then
        invalidates the views over memory the event takes away: the
        library unmaps it when this returns."""
        ev = Event.from_c(evp.contents)
        fn = self._on_event
        try:
            if fn is not None:
                try:
                    fn(ev)
                except BaseException as e:
                    self._keep(e)
        finally:
            self._after_event(ev)

    def _after_event(self, ev: Event) -> None:
        from .types import EventType as T
        if ev.type in (T.RECALL, T.EXPERT_SHRINK):
            name = "a RECALL" if ev.type == T.RECALL else "an EXPERT_SHRINK"
            self._views.invalidate_chunks(
                ev.chunks, f"{name} of expert slots [{ev.slot_first}, "
                           f"{ev.slot_end}) of stage {ev.stage}")
        elif ev.type == T.STAGE_LOST:
            self._kv_floor.pop(ev.stage, None)
            self._views.invalidate(lambda v: v.stage == ev.stage,
                                   f"STAGE_LOST of stage {ev.stage} (a reconnect "
                                   "could not take it back)")
        elif ev.type == T.RECONNECTED and self._handle is not None:
            # What could not be taken back is unmapped already: each view
            # still shows its chunks, or goes.
            h, out = self._handle, c_uint64()
            lost = set()
            for v in self._views.valid_records():
                for region, lane, slot, chunk in v.coords:
                    rc = self._lib.vram_region_chunk(h, region, lane, slot,
                                                     byref(out))
                    if rc != 0 or out.value != chunk:
                        lost.add(v)
                        break
            if lost:
                self._views.invalidate(lambda v: v in lost, "a reconnect that "
                                       "lost its chunks")

    # ---- connection ------------------------------------------------------

    @property
    def on_event(self) -> Optional[EventHandler]:
        """The event handler, or None (events are then only applied)."""
        return self._on_event

    @on_event.setter
    def on_event(self, fn: Optional[EventHandler]) -> None:
        if fn is not None and not callable(fn):
            raise TypeError("on_event must be callable or None")
        self._on_event = fn

    @property
    def id(self) -> int:
        """The daemon's id of this client (``vram_client_id``)."""
        return int(self._lib.vram_client_id(self._h()))

    @property
    def backend(self) -> str:
        """"host" or "cuda": what the daemon's chunks are."""
        return _decode(self._lib.vram_client_backend(self._h()))

    def fileno(self) -> int:
        """The connection's socket (``vram_client_fd``), for selectors and
        poll: when it is readable, call :meth:`dispatch`.  Its number stays
        the same across a reconnect (epoll users must add it again)."""
        return int(self._lib.vram_client_fd(self._h()))

    def dispatch(self) -> int:
        """Handles whatever arrived (events delivered, recalls answered)
        without waiting for data; returns the events handled
        (``vram_client_dispatch``)."""
        return int(self._invoke("vram_client_dispatch"))

    def start_event_thread(self) -> None:
        """Starts the library's event thread for this client: it reads the
        connection, answers recalls at once and runs the handler there,
        until :meth:`close`.  VramError EALREADY when started already."""
        self._invoke("vram_client_start_event_thread")

    def set_background_map(self, on: bool) -> None:
        """Mapping in the background (``vram_client_set_background_map``):
        with it on, :meth:`region_grow`, :meth:`kv_reserve` and
        :meth:`expert_request` return once their request is sent
        (``kv_reserve`` then returns a :class:`PendingKvResult`, whose
        fields wait for the reply), registration once vramd granted; a library
        thread reads the reply and maps while the engine goes on (reading
        its weights, say).  Touch the new memory only after :meth:`wait`;
        every other call waits for the reply and the mapping first.  A grow
        vramd refused after the call returned raises from :meth:`wait`, and
        once from the next call that sends a request."""
        self._invoke("vram_client_set_background_map", 1 if on else 0)

    def wait(self) -> int:
        """Waits until every chunk a background call brought is mapped and
        returns how many were mapped since the last wait
        (``vram_client_wait``).  VramError EIO when one failed: it is not
        mapped; or the background grow's own failure (ENOSPC, ETIMEDOUT,
        ECONNRESET...): nothing of it is mapped."""
        return int(self._invoke("vram_client_wait"))

    def ping(self) -> None:
        """A round trip that changes nothing (``vram_client_ping``)."""
        self._invoke("vram_client_ping")

    def devices(self) -> List[DeviceInfo]:
        """The daemon's devices (``vram_devices``)."""
        while True:
            n = self._invoke("vram_devices", None, 0)
            arr = (_lib.vram_device_info * max(n, 1))()
            m = self._invoke("vram_devices", arr, n)
            if m <= n:
                return [DeviceInfo.from_c(arr[i]) for i in range(m)]

    def status(self) -> Dict[str, Any]:
        """The daemon's status (``vram_status_json``), parsed."""
        p = POINTER(c_char)()
        self._invoke("vram_status_json", byref(p))
        try:
            text = ctypes.string_at(p)
        finally:
            self._lib.vram_free(ctypes.cast(p, c_void_p))
        return json.loads(text.decode("utf-8"))

    def chunks_held(self) -> int:
        """Chunks this client holds a handle for (diagnostics)."""
        return int(self._lib.vram_client_chunks_held(self._h()))

    # ---- stages ----------------------------------------------------------

    def stage_register(self, stage: u32, keep_window: bool = False) -> StageInfo:
        """Takes a stage of vramd's configuration: its regions are created
        and its initial KV window mapped before this returns
        (``vram_stage_register``; keep_window: VRAM_STAGE_KEEP_WINDOW, trims
        never shrink its KV).  ENOENT no such stage, EEXIST registered
        already, EAGAIN previous owner's memory quarantined, ETIMEDOUT,
        E2BIG, EADDRINUSE."""
        out = _lib.vram_stage_info()
        flags = _lib.VRAM_STAGE_KEEP_WINDOW if keep_window else 0
        self._invoke("vram_stage_register", stage, flags, byref(out))
        info = StageInfo.from_c(out)
        self._kv_floor[stage] = (None if keep_window or not info.kv_region
                                 else self._locked(
                                     lambda h: (info.kv_region,
                                                self._kv_prefix(h, info.kv_region))))
        return info

    def _kv_prefix(self, h: Any, region: int) -> List[int]:
        """The mapped slots at the start of each lane of region."""
        ri, out = _lib.vram_region_info(), c_uint64()
        if self._lib.vram_region_info(h, region, byref(ri)) < 0:
            return []
        prefix = []
        for lane in range(ri.lanes):
            usable = self._lib.vram_region_lane_slots(h, region, lane)
            n = 0
            while n < usable and self._lib.vram_region_chunk(
                    h, region, lane, n, byref(out)) == 0:
                n += 1
            prefix.append(n)
        return prefix

    def stage_register_adhoc(self, device: u32, first_layer: u32,
                             last_layer: u32) -> int:
        """A stage outside the configuration, for regions made by hand;
        returns its id (``vram_stage_register_adhoc``)."""
        out = c_uint32()
        self._invoke("vram_stage_register_adhoc", device, first_layer,
                     last_layer, byref(out))
        return out.value

    def stage_release(self, stage: u32) -> None:
        """Unmaps and gives back everything of the stage
        (``vram_stage_release``); the views over it are invalidated first.
        ENOENT not this client's; EBUSY a chunk is still mapped or open
        elsewhere in this process."""
        # The sets registration opened for it close with it.
        sets = self._stage_wsets.pop(stage, set())
        self._invoke("vram_stage_release", stage, before=lambda h: self._views.invalidate(
            lambda v: v.stage == stage or v.wset in sets, f"stage_release({stage})"))
        self._kv_floor.pop(stage, None)
        for wid in sets:
            w = self._wsets.pop(wid, None)
            if w is not None:
                w._closed = True

    def stage_weights(self, stage: u32, name: str) -> Weights:
        """The weight set that backs the configured stage's fixed reservation
        name (``vram_stage_weights``): :meth:`stage_register` opened it with
        the configured key and the reservation's size, read-only when
        sealed, else with this client as its writer (fill it, then
        :meth:`Weights.seal`).  :meth:`stage_release` closes it.  VramError
        ENOENT no such stage or reservation; ENODATA configured without a
        key (open it with :meth:`weights_open`); else the error
        registration's open met (EAGAIN: another client writes it)."""
        out = _lib.vram_weights_info()
        self._invoke("vram_stage_weights", stage, _c_text(name, "name"), byref(out))
        self._stage_wsets.setdefault(stage, set()).add(int(out.id))
        w = self._wsets.get(out.id)
        if w is not None and not w.closed:
            w._update(out)
            return w
        w = Weights(self, name, out)
        self._wsets[out.id] = w
        return w

    def stage_info(self, stage: u32) -> StageInfo:
        """The stage's figures as this process maps them (no round trip;
        ``vram_stage_info``).  ENOENT not registered by this client."""
        out = _lib.vram_stage_info()
        self._invoke("vram_stage_info", stage, byref(out))
        return StageInfo.from_c(out)

    def stage_regions(self, stage: u32) -> List[int]:
        """The ids of the stage's regions (``vram_stage_regions``)."""
        size = 16
        while True:
            ids = (c_uint32 * size)()
            n = self._invoke("vram_stage_regions", stage, ids, size,
                             message=f"stage {stage} is not registered by "
                                     "this client")
            if n <= size:
                return list(ids[:n])
            size = n

    def stage(self, stage: u32) -> "Stage":
        """The stage as an object (:class:`vram.Stage`: ``c.stage(0).sleep()``,
        ``.wake()``, ``.asleep``, ``.info()``).  ENOENT not registered by this
        client."""
        self.stage_info(stage)
        from .stage import Stage
        return Stage(self, stage)

    def stage_sleep(self, stage: u32, discard_kv: bool = False,
                    discard_experts: bool = False) -> None:
        """Gives all the stage's GPU memory back to vramd, its addresses
        kept reserved (``vram_stage_sleep``): what is kept is copied into
        host memory of this process first (pinned on cuda).  discard_kv
        (VRAM_SLEEP_DISCARD_KV) drops the KV regions' bytes, discard_experts
        (VRAM_SLEEP_DISCARD_EXPERTS) the expert region's; fixed regions are
        always kept.  The views over the stage's regions are invalidated
        first (the stage's weight sets are not touched: views of them stay).
        While asleep, calls that move the stage's memory raise EBUSY.
        ENOENT not this client's stage; EALREADY asleep already; ENOMEM no
        host memory for the copy, EIO the copy failed (nothing changed)."""
        flags = ((_lib.VRAM_SLEEP_DISCARD_KV if discard_kv else 0)
                 | (_lib.VRAM_SLEEP_DISCARD_EXPERTS if discard_experts else 0))

        def before(h: Any) -> None:
            # Only a stage this client has and that is awake unmaps
            # anything; any other call fails without touching a view.
            if self._lib.vram_stage_asleep(h, stage) == 0:
                self._views.invalidate(lambda v: v.stage == stage,
                                       f"stage_sleep({stage})")

        self._invoke("vram_stage_sleep", stage, flags, before=before)

    def stage_wake(self, stage: u32, keep_host: bool = False) -> None:
        """Takes the sleeping stage's memory again, at the same addresses,
        and copies its bytes back (``vram_stage_wake``): pointers and
        captured CUDA graphs stay valid; views made before the sleep do
        not (make them again).  keep_host (VRAM_WAKE_KEEP_HOST) keeps the
        host buffer for the stage's next sleep (pinning costs more than
        the copy).  EALREADY awake; ETIMEDOUT the KV hold bound passed,
        ENOSPC an ad-hoc stage's memory is taken: the stage sleeps on, its
        bytes kept, and may be woken later."""
        flags = _lib.VRAM_WAKE_KEEP_HOST if keep_host else 0
        self._invoke("vram_stage_wake", stage, flags)
        # CUDA tensors point at the chunks' addresses, which hold the
        # stage's memory again: they are good again where every slot came
        # back (expert slots may not).
        if self.backend != "host":
            out = c_uint64()

            def chunk_of(region: int, lane: int, slot: int) -> Optional[int]:
                return (int(out.value) if self._lib.vram_region_chunk(
                    self._h(), region, lane, slot, byref(out)) == 0 else None)

            self._locked(lambda h: self._views.revalidate(f"stage_sleep({stage})",
                                                          chunk_of))

    def stage_asleep(self, stage: u32) -> bool:
        """True while the stage sleeps (``vram_stage_asleep``; no round
        trip).  ENOENT not this client's stage."""
        return bool(self._invoke("vram_stage_asleep", stage,
                                 message=f"stage {stage} is not registered by "
                                         "this client"))

    # ---- regions ---------------------------------------------------------

    def region_create(self, stage: u32, kind: Union[RegionKind, u32],
                      lane_bytes: u64, lanes: u32 = 1) -> int:
        """A region of an ad-hoc stage, nothing mapped yet; returns its id
        (``vram_region_create``)."""
        out = c_uint32()
        self._invoke("vram_region_create", stage, kind, lane_bytes,
                     lanes, byref(out))
        return out.value

    def region_info(self, region: u32) -> RegionInfo:
        """The region's layout and mapped count (no round trip;
        ``vram_region_info``).  ENOENT not this client's region."""
        out = _lib.vram_region_info()
        self._invoke("vram_region_info", region, byref(out),
                     message=f"region {region} is not this client's")
        return RegionInfo.from_c(out)

    def region_name(self, region: u32) -> str:
        """A fixed or draft_kv region's configured name ("weights"), else its
        kind's name ("kv", "expert") (``vram_region_name``).  VramError
        ENOENT when the region is not this client's."""
        name = self._invoke("vram_region_name", region, check=False)
        if name is None:
            raise VramError(_errno.ENOENT, f"region {region} is not this "
                            "client's", call="vram_region_name")
        return _decode(name)

    def region_lane_slots(self, region: u32, lane: u32) -> int:
        """Usable slots of one lane (``vram_region_lane_slots``).  ENOENT
        no such region or lane."""
        return int(self._invoke(
            "vram_region_lane_slots", region, lane,
            message=f"region {region} has no lane {lane} here"))

    def region_grow(self, region: u32, chunks: u32) -> None:
        """Backs the next chunks slots of every lane (ad-hoc stages and
        fixed regions; ``vram_region_grow``)."""
        self._invoke("vram_region_grow", region, chunks)

    def region_shrink(self, region: u32, chunks: u32) -> None:
        """Unmaps and releases the last chunks of every lane
        (``vram_region_shrink``); the views over them are invalidated
        first."""
        def before(h: Any) -> None:
            # The chunks the library drops: the last `chunks` mapped of each
            # lane, from the top down.
            ri, out, ids = _lib.vram_region_info(), c_uint64(), set()
            if self._lib.vram_region_info(h, region, byref(ri)) < 0:
                return
            for lane in range(ri.lanes):
                slot = self._lib.vram_region_lane_slots(h, region, lane) - 1
                k = 0
                while slot >= 0 and k < chunks:
                    if self._lib.vram_region_chunk(h, region, lane, slot,
                                                   byref(out)) == 0:
                        ids.add(out.value)
                        k += 1
                    slot -= 1
            self._views.invalidate_chunks(
                ids, f"region_shrink({region}, {chunks})")

        self._invoke("vram_region_shrink", region, chunks, before=before)

    def region_release(self, region: u32) -> None:
        """Unmaps and releases the region (``vram_region_release``); the
        views over it are invalidated first."""
        self._invoke("vram_region_release", region, before=lambda h: self._views.invalidate(
            lambda v: v.region == region, f"region_release({region})"))

    def region_move_chunk(self, src_region: u32, src_lane: u32, src_slot: u32,
                          dst_region: u32, dst_lane: u32, dst_slot: u32) -> None:
        """Moves a chunk to an empty slot of another region of this client
        (``vram_region_move_chunk``); the memory keeps its bytes.  The
        views over its old slot are invalidated first (make new ones over
        the new slot)."""
        def before(h: Any) -> None:
            out = c_uint64()
            if self._lib.vram_region_chunk(h, src_region, src_lane, src_slot,
                                           byref(out)) == 0:
                self._views.invalidate_chunks(
                    [out.value], f"region_move_chunk from region {src_region} "
                                 f"lane {src_lane} slot {src_slot}")

        self._invoke("vram_region_move_chunk", src_region, src_lane, src_slot,
                     dst_region, dst_lane, dst_slot, before=before)

    def region_chunk(self, region: u32, lane: u32, slot: u32) -> Optional[int]:
        """The id of the chunk mapped at slot of lane, or None when the slot
        holds no memory now (touching it would fault;
        ``vram_region_chunk``).  VramError ENOENT when the region is not
        this client's."""
        out = c_uint64()
        rc = self._invoke("vram_region_chunk", region, lane, slot, byref(out),
                          check=False)
        if rc == 0:
            return out.value
        self.region_info(region)  # raises for a region not this client's
        return None

    def region_slot(self, region: u32, lane: u32, slot: u32) -> Optional[int]:
        """The address of slot of lane, mapped or not: base + lane *
        lane_stride + slot * chunk_bytes; None out of range
        (``vram_region_slot``)."""
        return self._invoke("vram_region_slot", region, lane, slot, check=False)

    # ---- KV budget and expert loans ------------------------------------------

    def kv_reserve(self, stage: u32, prompt: u64, output: u64,
                   hold: bool = True) -> Union[KvResult, "PendingKvResult"]:
        """Maps KV for prompt + output tokens before decode and returns when
        all of it is mapped (``vram_kv_reserve``; hold: VRAM_KV_HOLD, wait
        for recalls up to the stage's hold_ms).  E2BIG over the native
        context (the message names it); EAGAIN must wait and hold was
        False; ETIMEDOUT hold_ms passed; ENOENT; EPERM; EBUSY.  Expert
        slots it takes back (EXPERT_SHRINK) lose their views.  With
        background mapping on it returns once the request is sent: a
        :class:`PendingKvResult`, whose fields wait for the reply (and
        raise its failure)."""
        out = _lib.vram_kv_result()
        flags = _lib.VRAM_KV_HOLD if hold else 0
        earlier = self._pending_kv.pop(stage, None)
        if earlier is not None:  # its result is the library's until this one's
            earlier._settle()
        rc = self._invoke("vram_kv_reserve", stage, prompt, output, flags, byref(out))
        if rc == _lib.VRAM_PENDING:
            p = self._pending_kv[stage] = PendingKvResult(self, stage)
            return p
        return KvResult.from_c(out)

    def kv_reserve_result(self, stage: u32) -> KvResult:
        """What the stage's last background :meth:`kv_reserve` did, once its
        reply came and was mapped (``vram_kv_reserve_result``; waits for
        that).  VramError: that reserve's own failure, or ENOENT when the
        stage has had none."""
        out = _lib.vram_kv_result()
        self._invoke("vram_kv_reserve_result", stage, byref(out))
        return KvResult.from_c(out)

    def kv_trim(self, stage: u32, tokens: u64 = 0) -> None:
        """After a request: KV back to the initial window (tokens 0) or to
        tokens; the surplus becomes expert loans as far as there is room
        (``vram_kv_trim``).  Every view over the stage's KV beyond its
        initial window -- the part a trim may give back, whatever tokens
        says -- is invalidated first; views within the initial window stay
        valid (nothing is trimmed for a keep_window stage)."""
        def before(h: Any) -> None:
            floor = self._kv_floor.get(stage)
            if floor is None:
                return
            kv, prefix = floor
            self._views.invalidate(
                lambda v: v.region == kv and any(
                    lane >= len(prefix) or slot >= prefix[lane]
                    for _, lane, slot, _ in v.coords),
                f"kv_trim({stage}) (KV beyond the initial window)")

        self._invoke("vram_kv_trim", stage, tokens, before=before)

    def expert_request(self, stage: u32, max_bytes: u64 = 0) -> Residency:
        """Asks for expert loans (at most max_bytes, whole chunks; 0: all
        there is) and returns the residency after
        (``vram_expert_request``).  Getting less, or nothing, is not an
        error.  EPERM missed a recall deadline or ad-hoc stage; EDQUOT;
        ENOENT."""
        self._invoke("vram_expert_request", stage, max_bytes)
        return self.expert_residency(stage)

    def expert_claim(self, stage: u32, layer: u32, slots: Iterable[u32]) -> None:
        """Claims backed expert slots for one layer, all or none
        (``vram_expert_claim``).  EINVAL a slot not backed; EBUSY claimed
        by another layer; EPERM layer outside the stage."""
        s = list(slots)
        arr = (c_uint32 * max(len(s), 1))(*s)
        self._invoke("vram_expert_claim", stage, layer, arr, len(s))

    def expert_residency(self, stage: u32) -> Residency:
        """The stage's residency, current (no round trip;
        ``vram_expert_residency``)."""
        out = _lib.vram_residency()
        self._invoke("vram_expert_residency", stage, byref(out),
                     message=f"stage {stage} is not registered by this client")
        return Residency.from_c(out)

    def expert_slots(self, stage: u32) -> int:
        """Expert slots of the stage's expert region, backed or not
        (``vram_expert_slots``)."""
        return int(self._invoke(
            "vram_expert_slots", stage,
            message=f"stage {stage} is not registered by this client"))

    def expert_slot(self, stage: u32, slot: u32) -> Optional[int]:
        """The address of expert slot (expert region base + slot *
        expert_slot_bytes), None past the region (``vram_expert_slot``).
        It has memory while slot < expert_slots_backed."""
        return self._invoke("vram_expert_slot", stage, slot, check=False)

    # ---- weight sets --------------------------------------------------------

    def weights_open(self, name: str, device: u32, nbytes: u64,
                     key: Union[bytes, bytearray, memoryview], *,
                     nowait: bool = False, keep: bool = False) -> Weights:
        """Opens weight set name, of nbytes on device, whose layout key is
        the 32 bytes key (:func:`vram.weights_key` makes one), and returns
        it as a :class:`Weights` (``vram_weights_open``; ``docs/python.md``,
        "Weight sets").

        When vramd has a sealed set of that name, key, device and size, it
        is mapped read-only (``writer`` False, ``sealed`` True): several
        engines share one copy, and the next engine finds it again, even
        when no engine mapped it meanwhile (cached sets are evicted, least
        recently used first, only when memory is needed).  When it has
        none, this client becomes its writer: the set is mapped read-write
        (``writer`` True), the engine fills it through :meth:`Weights.array`
        or :meth:`Weights.tensor`, then calls :meth:`Weights.seal`.  A
        second open of a set this client has open gives the same object.

        While another client writes the set the call waits for its seal
        (within the client's timeout: ETIMEDOUT past it), or with nowait
        raises VramError EAGAIN at once.  keep (admins only: EPERM
        otherwise): the set is never evicted, only dropped by an admin
        (:meth:`admin_weights_drop`).  VramError ESTALE: a set of that name
        exists with another key, size or device (the message names its size
        and when it was sealed; it is never mapped); EACCES: another user's
        set (``access.weights``); ENOSPC: no room on the device even after
        evicting cached sets; EDQUOT: ``limits.weight_sets_per_user``;
        EINVAL: a name that is not 1 to 64 printable bytes without spaces;
        ENODEV.  A key that is not 32 bytes: ValueError (TypeError for a
        str or a non-buffer)."""
        kb = _key_bytes(key)
        name_b = _c_text(name, "name")
        arr = (ctypes.c_uint8 * len(kb)).from_buffer_copy(kb)
        flags = ((_lib.VRAM_WEIGHTS_NOWAIT if nowait else 0)
                 | (_lib.VRAM_WEIGHTS_KEEP if keep else 0))
        out = _lib.vram_weights_info()
        self._invoke("vram_weights_open", name_b, device, nbytes, arr, flags,
                     byref(out))
        w = self._wsets.get(out.id)
        if w is not None and not w.closed:
            w._update(out)
            return w
        w = Weights(self, name if isinstance(name, str) else _decode(name_b),
                    out)
        self._wsets[out.id] = w
        return w

    def admin_weights_drop(self, name: str) -> None:
        """Admin only: drops weight set name, which no client may map
        (``vram_admin_weights_drop``); its memory is freed.  VramError
        EBUSY names a client that maps it; EPERM not an admin; ENOENT no
        such set."""
        self._invoke("vram_admin_weights_drop", _c_text(name, "name"))

    # ---- administration --------------------------------------------------

    def admin_evict(self, client: u32) -> None:
        """Admin only: disconnects another client (``vram_admin_evict``)."""
        self._invoke("vram_admin_evict", client)

    def admin_set_capacity(self, device: u32, nbytes: u64) -> None:
        """Admin only: a device's capacity at run time
        (``vram_admin_set_capacity``)."""
        self._invoke("vram_admin_set_capacity", device, nbytes)

    # ---- zero-copy views -------------------------------------------------

    def _require_host(self, what: str) -> None:
        backend = self.backend
        if backend != "host":
            raise NotImplementedError(
                f"vram.Client.{what}: the {backend} backend's addresses are "
                "device memory, not readable by the CPU: use the torch "
                "tensors (lane_tensor, expert_slot_tensor)")

    def _lane_span(self, region: int, lane: int, first_slot: int,
                   nslots: Optional[int], what: str) -> "_Span":
        """The mapped chunk slots [first_slot, first_slot + nslots) of a
        lane, or raises."""
        info = self.region_info(region)
        usable = self.region_lane_slots(region, lane)
        if nslots is not None and nslots < 1:
            raise ValueError(f"{what}: nslots={nslots}: a view covers at "
                             "least one slot")

        def unmapped(slot: int) -> VramError:
            return VramError(_errno.EFAULT,
                             f"lane {lane} slot {slot} of region {region} "
                             "holds no memory now (or is past the lane's "
                             f"{usable} slots): no view over it", call=what)

        coords = []
        slot = first_slot
        while nslots is None or slot < first_slot + nslots:
            chunk = self.region_chunk(region, lane, slot) if slot < usable else None
            if chunk is None:
                if nslots is None and coords:
                    break  # the mapped run ends here
                raise unmapped(slot)
            coords.append((region, lane, slot, chunk))
            slot += 1
        addrs = [self.region_slot(region, lane, c[2]) for c in coords]
        if not all(addrs):  # cannot happen for a mapped slot
            raise unmapped(first_slot)
        n = len(coords)
        desc = (f"{what}(region {region}, lane {lane}, slot{'s' if n > 1 else ''} "
                f"{first_slot}{f'..{first_slot + n - 1}' if n > 1 else ''})")
        return _Span(desc, info.stage, region, coords, addrs, addrs[0],
                     n * info.chunk_bytes, info.chunk_bytes)

    def _expert_span(self, stage: int, slot: int, what: str) -> "_Span":
        """A backed expert slot, or raises."""
        res = self.expert_residency(stage)
        info = self.stage_info(stage)
        addr = (self.expert_slot(stage, slot)
                if slot < res.expert_slots_backed else None)
        if not addr:
            raise VramError(_errno.EFAULT,
                            f"expert slot {slot} of stage {stage} is not "
                            f"backed ({res.expert_slots_backed} slots are): "
                            "no view over it", call=what)
        # The chunk slots of the expert region under it (an expert slot need
        # not be a whole number of chunks).
        ex = info.expert_region
        cb = self.region_info(ex).chunk_bytes
        off, size = slot * info.expert_slot_bytes, info.expert_slot_bytes
        coords, addrs = [], []
        for k in range(off // cb, (off + size + cb - 1) // cb):
            chunk = self.region_chunk(ex, 0, k)
            a = self.region_slot(ex, 0, k)
            if chunk is None or not a:
                raise VramError(_errno.EFAULT, f"expert slot {slot} of stage "
                                f"{stage} lost its memory: no view over it",
                                call=what)
            coords.append((ex, 0, k, chunk))
            addrs.append(a)
        return _Span(f"{what}(stage {stage}, slot {slot})", stage, ex, coords,
                     addrs, addr, size, cb)

    def _view(self, locate: Callable[[], "_Span"]) -> _views.View:
        """The record of a new view, over a mapping of its own on the host
        backend (vram._views); locate() reads where the memory is, again
        when memory moved meanwhile."""
        alias = self.backend == "host" and _views.aliasing_available()
        for _ in range(64):
            gen = self._views.gen
            sp = locate()

            def make() -> _views.View:
                if not alias:
                    return _views.View(sp.what, sp.stage, sp.region, sp.coords,
                                       sp.addr, sp.nbytes, None)
                base = _views._alias(sp.chunk_addrs, sp.chunk_bytes)
                return _views.View(
                    sp.what, sp.stage, sp.region, sp.coords,
                    base + (sp.addr - sp.chunk_addrs[0]), sp.nbytes,
                    (base, len(sp.chunk_addrs) * sp.chunk_bytes))

            try:
                v = self._views.add(gen, make)
            except _views.AliasError as e:
                if e.errno != _errno.EINVAL:  # not the memory going meanwhile
                    raise VramError(e.errno, str(e), call=sp.what) from None
                v = None
            if v is not None:
                return v
        raise VramError(_errno.EAGAIN, "the memory kept moving while the view "
                        "was made: try again", call="view")

    def _array(self, np: Any, v: _views.View, dtype: Any) -> Any:
        """The numpy array over view v (whose record goes with the last
        array over it; with v now when this fails)."""
        try:
            dt = np.dtype(dtype)
            if v.size % dt.itemsize:
                raise ValueError(f"{v.size} bytes are not a whole number of "
                                 f"{dt} items")
        except BaseException:
            self._views.forget(v)
            raise
        buf = (ctypes.c_ubyte * v.size).from_address(v.addr)
        buf._vram_owner = self  # the client stays alive under a view
        # Not at interpreter exit, while arrays over it may still be touched.
        weakref.finalize(buf, self._views.forget, v).atexit = False
        return np.frombuffer(buf, dtype=dt)

    def lane_view(self, region: u32, lane: u32, first_slot: u32 = 0,
                  nslots: Optional[u32] = None, dtype: Any = "uint8") -> Any:
        """A writable numpy array over chunk slots [first_slot, first_slot +
        nslots) of one lane of a region, zero-copy (host backend).

        nslots None means as many slots from first_slot as are mapped in a
        row (a KV budget is always the first slots of each lane).  Every
        slot covered must hold memory now (``vram_region_chunk``), or
        VramError EFAULT is raised and no view made; a region or lane that
        is not this client's raises ENOENT.  The length is nslots *
        chunk_bytes bytes, as dtype items.  The array maps the memory
        itself, at an address of its own (not the region's): when the
        memory goes (a trim beyond the initial window, a shrink, a release,
        close) it is invalidated -- it reads zeros, its writes reach no
        memory of vramd's, :meth:`view_valid` says False -- and never
        faults (see "Memory views" in the class documentation).  Raises NotImplementedError on
        the cuda backend (use lane_tensor), ImportError without numpy.
        """
        self._require_host("lane_view")
        np = _numpy()
        v = self._view(lambda: self._lane_span(region, lane, first_slot,
                                               nslots, "lane_view"))
        return self._array(np, v, dtype)

    def expert_slot_view(self, stage: u32, slot: u32, dtype: Any = "uint8") -> Any:
        """A writable numpy array over expert slot of the stage
        (expert_slot_bytes long), zero-copy (host backend).

        The slot must be backed (slot < expert_slots_backed), or VramError
        EFAULT is raised.  A RECALL or EXPERT_SHRINK covering the slot, a
        release or close invalidates it: it then reads zeros and never
        faults (see "Memory views" in the class documentation).  Raises
        NotImplementedError on the cuda backend (use expert_slot_tensor),
        ImportError without numpy.
        """
        self._require_host("expert_slot_view")
        np = _numpy()
        v = self._view(lambda: self._expert_span(stage, slot, "expert_slot_view"))
        return self._array(np, v, dtype)

    # ---- zero-copy torch tensors (cuda: device memory; host: CPU) --------

    def _tensor(self, locate: Callable[[], "_Span"], dtype: Any) -> Any:
        try:
            import torch
        except ImportError as e:
            raise ImportError("vram tensors need PyTorch (pip install torch, "
                              "or Debian's python3-torch)") from e
        dtype = dtype if dtype is not None else torch.uint8
        itemsize = torch.empty((), dtype=dtype).element_size()
        v = self._view(locate)
        if v.size % itemsize:
            self._views.forget(v)
            raise ValueError(f"{v.size} bytes are not a whole number of "
                             f"{dtype} items")
        if self.backend == "host":
            np = _numpy()
            return torch.from_numpy(self._array(np, v, "uint8")).view(dtype)
        # CUDA: the memory is the daemon's chunks, mapped at a fixed address
        # in this process's device address space; torch takes it through
        # __cuda_array_interface__ (no copy, no ownership: the tensor keeps
        # the span object, which keeps the client).
        span = _CudaSpan(v.addr, v.size, self)
        weakref.finalize(span, self._views.forget, v).atexit = False
        return torch.as_tensor(span, device="cuda").view(dtype)

    def lane_tensor(self, region: u32, lane: u32, first_slot: u32 = 0,
                    nslots: Optional[u32] = None, dtype: Any = None) -> Any:
        """A torch tensor over mapped chunk slots of a lane, zero-copy: on
        the cuda backend a CUDA tensor over the chunks' device memory (its
        address never changes, so CUDA graphs captured over it replay after
        every budget change), on the host backend a CPU tensor over a
        mapping of its own, as lane_view.  The same checks as lane_view:
        every slot covered must hold memory now, else VramError EFAULT.
        dtype defaults to torch.uint8.  Invalidated when the memory goes,
        as lane_view (see "Memory views" in the class documentation: on
        cuda an invalidated tensor points at unmapped device memory)."""
        return self._tensor(lambda: self._lane_span(region, lane, first_slot,
                                                    nslots, "lane_tensor"),
                            dtype)

    def expert_slot_tensor(self, stage: u32, slot: u32, dtype: Any = None) -> Any:
        """A torch tensor over a backed expert slot (expert_slot_bytes),
        zero-copy, as lane_tensor; VramError EFAULT when the slot is not
        backed.  Invalidated by a RECALL or EXPERT_SHRINK covering it, a
        release or close."""
        return self._tensor(lambda: self._expert_span(stage, slot,
                                                      "expert_slot_tensor"),
                            dtype)

    # ---- whether a view is still good --------------------------------------

    def _records_of(self, view: Any) -> List[_views.View]:
        addr, nbytes = _views.extent(view)
        found = self._views.find(addr, nbytes)
        if not found:
            raise ValueError("not a view of this client's memory (or one "
                             "whose arrays are all gone)")
        return found

    def view_valid(self, view: Any) -> bool:
        """Whether a numpy array or torch tensor from this client's views
        (or a slice of one) still shows the memory it was made over: False
        once that memory went (see "Memory views").  ValueError for an
        array that is not such a view."""
        return any(v.valid for v in self._records_of(view))

    def check_view(self, view: Any) -> None:
        """Raises VramError ESTALE, naming what took the memory, when
        view_valid(view) is False."""
        recs = self._records_of(view)
        if any(v.valid for v in recs):
            return
        v = recs[0]
        raise VramError(_errno.ESTALE, f"{v.what} was invalidated by "
                        f"{v.reason}: its memory went back to vramd, so it "
                        "reads zeros and what is written to it reaches nothing; make a new "
                        "view",
                        call="check_view")


class _Span:
    """Where a view's memory is: its chunk slots (region, lane, slot,
    chunk) and their addresses, and the view's start and length."""

    __slots__ = ("what", "stage", "region", "coords", "chunk_addrs", "addr",
                 "nbytes", "chunk_bytes")

    def __init__(self, what: str, stage: int, region: int,
                 coords: List[Tuple[int, int, int, int]], chunk_addrs: List[int],
                 addr: int, nbytes: int, chunk_bytes: int) -> None:
        self.what, self.stage, self.region = what, stage, region
        self.coords, self.chunk_addrs = coords, chunk_addrs
        self.addr, self.nbytes, self.chunk_bytes = addr, nbytes, chunk_bytes


class PendingKvResult:
    """What :meth:`Client.kv_reserve` returns with background mapping on:
    the request is sent, the reply not yet read. Reading a field
    (``kv_mapped_bytes``, ...) or :meth:`result` waits for the reply and
    its mapping (:meth:`Client.kv_reserve_result`) and gives what the
    blocking call would have returned, or raises its failure (ENOSPC,
    ETIMEDOUT, E2BIG...). It stays right after the stage's next reserve:
    that one settles it first."""

    _FIELDS = ("kv_needed_bytes", "kv_mapped_bytes", "expert_loaned_bytes",
               "expert_slots_backed", "recalled_chunks")

    def __init__(self, client: "Client", stage: int) -> None:
        self.stage = stage
        self._client: Optional["Client"] = client
        self._got: Optional[KvResult] = None
        self._error: Optional[VramError] = None

    def _settle(self) -> None:
        if self._client is None:
            return
        client, self._client = self._client, None
        try:
            self._got = client.kv_reserve_result(self.stage)
        except VramError as e:
            self._error = e
        if client._pending_kv.get(self.stage) is self:
            del client._pending_kv[self.stage]

    @property
    def pending(self) -> bool:
        """Not read yet (reading waits)."""
        return self._client is not None

    def result(self) -> KvResult:
        """The reserve's :class:`KvResult` (waits); raises its failure."""
        self._settle()
        if self._error is not None:
            raise self._error
        assert self._got is not None
        return self._got

    def __getattr__(self, name: str) -> Any:
        if name in PendingKvResult._FIELDS:
            return getattr(self.result(), name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        if self._client is not None:
            return f"PendingKvResult(stage={self.stage}, pending)"
        return f"PendingKvResult(stage={self.stage}, {self._error or self._got})"
