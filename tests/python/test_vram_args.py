# SPDX-License-Identifier: Apache-2.0
"""Every integer argument of the vram package is range-checked before it
reaches ctypes (which would take it modulo 2**32 or 2**64 without a word).

The calls tried are found by introspection: every public method of
vram.Client (its constructor and from_fd included) and of vram.Weights (on
a set the client opened), vram.strerror, and every parameter of theirs
that is an integer by its annotation.  Each gets
-1, 2**32, 2**64 and 2**64 + 5 (those outside its C range), a bool, a float
and a string, against a real daemon of its own, and must raise the
documented exception naming the call and the argument -- TypeError (not an
integer, or a bool), ValueError (negative for an unsigned type),
OverflowError (beyond the type) -- with the daemon's state unchanged.  A
public parameter without an annotation fails the test, so a new call
cannot be left out.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vram import CONFIG, Daemon  # noqa: E402  (sets sys.path, VRAM_LIB)

import vram  # noqa: E402

try:
    from vram import _args
except ImportError:  # a package without the checks: read plain int
    _args = None

BAD = (-1, 2**32, 2**64, 2**64 + 5)
NOT_INT = (True, 1.5, "3")

# The C range of each integer parameter, by name, for a package whose
# annotations say only "int" (to show what such a package does; the test
# fails there anyway: every parameter must declare its range).
U32 = ("u32", 0, 2**32 - 1)
U64 = ("u64", 0, 2**64 - 1)
GUESS = {
    **{n: U32 for n in ("stage", "region", "lane", "slot", "device", "client",
                        "layer", "chunks", "lanes", "first_layer", "last_layer",
                        "first_slot", "nslots", "kind", "src_region",
                        "src_lane", "src_slot", "dst_region", "dst_lane",
                        "dst_slot", "slots")},
    **{n: U64 for n in ("prompt", "output", "tokens", "max_bytes",
                        "lane_bytes", "nbytes")},
    "timeout_ms": ("ms", 0, 2**31 - 1), "reconnect_ms": ("i32", -2**31, 2**31 - 1),
    "fd": ("handle", 0, 2**63 - 1), "err": ("i32", -2**31, 2**31 - 1),
}

daemon: Optional[Daemon] = None
_FD = object()
WEIGHTS = "Weights."  # the label of a vram.Weights method: Weights.array  # from_fd's fd, when another argument is tried


class Index:
    """An integer that is not an int (as numpy's are): operator.index."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


def setUpModule() -> None:
    global daemon
    # Another address window than test_vram.py's daemon: run in the same
    # process (ctest), its allocator shim keeps a region mapped there.
    daemon = Daemon(CONFIG.replace(
        "{\"devices\"", "{\"address_window\": {\"base\": \"0x300000000000\","
        " \"size\": \"1TiB\"}, \"devices\"", 1))
    daemon.start()


def tearDownModule() -> None:
    if daemon:
        daemon.stop()


def public_calls() -> List[Tuple[str, Any]]:
    """(name, function) of every public call that takes arguments."""
    out = [("Client", vram.Client.__init__), ("strerror", vram.strerror)]
    for name, attr in vars(vram.Client).items():
        if name.startswith("_") or name == "from_fd":
            continue
        if inspect.isfunction(attr):
            out.append((name, attr))
    weights = getattr(vram, "Weights", None)
    for name, attr in vars(weights).items() if weights else ():
        if not name.startswith("_") and inspect.isfunction(attr):
            out.append((WEIGHTS + name, attr))
    # Last: a package that does not check would take (and close) whatever
    # descriptor a wrapped fd names.
    out.append(("from_fd", vram.Client.from_fd))
    return out


def int_params(fn: Any) -> Dict[str, Tuple[str, int, int, str]]:
    """Parameter -> (type name, lo, hi, "one" | "optional" | "each")."""
    if _args is not None:
        rules = _args.int_params(fn)
        return {n: (k.name, k.lo, k.hi, how) for n, (k, how) in rules.items()}
    out = {}
    for name, p in inspect.signature(inspect.unwrap(fn)).parameters.items():
        ann = str(p.annotation)
        if name in GUESS and "int" in ann:
            how = ("each" if "Iterable" in ann else
                   "optional" if "Optional" in ann else "one")
            out[name] = (*GUESS[name], how)
    return out


class TestIntegerArguments(unittest.TestCase):
    """Each bad integer of each public call: the documented exception, and
    nothing changed in the daemon or in the client."""

    def setUp(self) -> None:
        assert daemon
        self.ctl = vram.Client(daemon.sock, name="py-args-ctl", ctl=True)
        self.addCleanup(self.ctl.close)
        self.c = vram.Client(daemon.sock, name="py-args")
        self.addCleanup(self.c.close)
        self.info = self.c.stage_register(0)
        # A sealed weight set, for the methods of vram.Weights (the first
        # test's is the next one's: a reader's then).
        self.w = None
        if hasattr(self.c, "weights_open"):
            self.w = self.c.weights_open("py-args", 0, 2 << 20, bytes(32))
            if self.w.writer:
                self.w.seal()

    def state(self) -> Any:
        """What a wrapped argument would change: the daemon's devices,
        stages, clients and counters, and this client's own figures."""
        st = self.ctl.status()
        for d in st["devices"]:
            d.pop("pool_ready_chunks", None)
        mine = (self.c.chunks_held(), self.c.stage_info(0),
                self.c.expert_residency(0)) if not self.c.closed else None
        return (st["devices"], st["stages"], st["clients"], st["counters"], mine)

    def filler(self, fn: Any, name: str, p: inspect.Parameter,
               ints: Dict[str, Any]) -> Any:
        """A valid value for a parameter that is not the one tried."""
        if name == "fd":
            return _FD
        if name in ints:
            kind, lo, hi, how = ints[name]
            if how in ("each", "optional each"):
                return [1]
            return 0 if lo <= 0 <= hi else lo
        if p.default is not inspect.Parameter.empty:
            return p.default
        if name == "path":
            assert daemon
            return daemon.sock
        if name == "name":  # weights_open's
            return "py-args"
        if name == "key":
            return bytes(32)
        raise AssertionError(f"no value to give {fn.__qualname__}({name})")

    def call(self, label: str, fn: Any, args: Dict[str, Any]) -> Any:
        assert daemon
        if label == "Client":
            return vram.Client(**args)
        if label == "from_fd":
            fd = None
            if args["fd"] is _FD:  # a socket, when fd is not the one tried:
                # one end of a pair whose other end is closed (nothing that
                # the daemon would count)
                mine, other = socket.socketpair()
                other.close()
                fd = args["fd"] = mine.detach()
            try:
                return vram.Client.from_fd(**args)
            finally:
                if fd is not None:
                    try:
                        os.close(fd)  # refused before it was taken
                    except OSError:
                        pass
        if label == "strerror":
            return vram.strerror(**args)
        if label.startswith(WEIGHTS):
            return getattr(self.w, label[len(WEIGHTS):])(**args)
        return getattr(self.c, label)(**args)

    def test_every_integer_argument_is_checked(self) -> None:
        calls = public_calls()
        self.assertGreater(len(calls), 30)
        tried, labels = 0, set()
        for label, fn in calls:
            sig = inspect.signature(inspect.unwrap(fn))
            params = [(n, p) for n, p in sig.parameters.items()
                      if n not in ("self", "cls")]
            for n, p in params:
                with self.subTest(call=label, param=n, what="annotated"):
                    self.assertIsNot(p.annotation, inspect.Parameter.empty,
                                     f"{label}({n}) has no annotation: say "
                                     "what it takes (an integer: its C range)")
            ints = int_params(fn)
            for target, (kind, lo, hi, how) in ints.items():
                values = [v for v in BAD if not lo <= v <= hi] + list(NOT_INT)
                for bad in values:
                    args = {n: self.filler(fn, n, p, ints) for n, p in params
                            if p.kind is not inspect.Parameter.VAR_KEYWORD}
                    each = how in ("each", "optional each")
                    args[target] = [0, bad] if each else bad
                    if isinstance(bad, bool) or not isinstance(bad, int):
                        want = TypeError
                    elif bad < 0 and lo == 0:
                        want = ValueError
                    else:
                        want = OverflowError
                    shown = f"{target}[1]" if each else target
                    with self.subTest(call=label, param=target, value=bad):
                        tried += 1
                        labels.add(label)
                        before = self.state()
                        try:
                            got = self.call(label, fn, args)
                        except want as e:
                            self.assertIn(label.replace(WEIGHTS, ""), str(e))
                            self.assertIn(shown, str(e))
                            if want is not TypeError:
                                self.assertIn(f"={bad}", str(e))
                                self.assertIn(kind, str(e))
                        except Exception as e:  # noqa: BLE001
                            self.fail(f"{label}({target}={bad!r}) raised "
                                      f"{type(e).__name__}: {e}, not "
                                      f"{want.__name__}")
                        else:
                            if isinstance(got, vram.Client):
                                got.close()
                            self.fail(f"{label}({target}={bad!r}) returned "
                                      f"{got!r} instead of raising "
                                      f"{want.__name__}")
                        self.assertEqual(self.state(), before,
                                         f"{label}({target}={bad!r}) changed "
                                         "the daemon's or the client's state")
        self.assertGreater(tried, 100)
        if hasattr(vram, "Weights"):  # the weight sets' calls among them
            self.assertLessEqual({"weights_open", WEIGHTS + "array",
                                  WEIGHTS + "tensor"}, labels)

    def test_the_issue_examples(self) -> None:
        """stage_register(2**32) registers no stage 0, admin_evict(2**32 +
        n) evicts nobody, kv_reserve(0, 2**64 + 5, 0) reserves nothing."""
        assert daemon
        with vram.Client(daemon.sock, name="py-args-a") as a, \
                vram.Client(daemon.sock, name="py-args-b") as b:
            with self.assertRaises(OverflowError) as cm:
                a.stage_register(2**32 + 1)
            self.assertIn("stage_register: stage=4294967297 is out of range "
                          "for u32 (0..4294967295)", str(cm.exception))
            st = {s["id"]: s for s in self.ctl.status()["stages"]}
            self.assertNotEqual(st[1].get("owner"), a.id)
            with self.assertRaises(OverflowError):
                a.admin_evict(2**32 + b.id)
            b.ping()  # still connected
            with self.assertRaises(ValueError) as cm:
                a.admin_evict(-1)
            self.assertIn("admin_evict: client=-1 is negative", str(cm.exception))
            needed = {s["id"]: s["kv_needed_bytes"]
                      for s in self.ctl.status()["stages"]}[0]
            with self.assertRaises(OverflowError):
                self.c.kv_reserve(0, 2**64 + 5, 0)
            self.assertEqual({s["id"]: s["kv_needed_bytes"]
                              for s in self.ctl.status()["stages"]}[0], needed)
            with self.assertRaises(TypeError):
                self.c.kv_reserve(True, 5, 0)
            with self.assertRaises(TypeError):
                self.c.expert_claim(0, 0, [0.5])
            # What passes: numpy-style integers (operator.index) and enums.
            self.assertEqual(self.c.stage_info(Index(0)).stage, 0)
            self.assertEqual(self.c.stage_info(vram.RegionKind.KV).stage, 0)
            with self.assertRaises(ValueError):
                vram.Client(daemon.sock, name="nul\0byte")


if __name__ == "__main__":
    unittest.main()
