# SPDX-License-Identifier: Apache-2.0
"""Weight sets through Python (vram.Client.weights_open, vram.Weights,
vram.weights_key) against the real daemon, with real processes.

- A writer fills a set through a view, seals it; a reader in another
  process maps the same address and finds the same bytes (SHA-256 of the
  whole set, which spans three allocations).
- A sealed set's numpy views refuse writes (ValueError), and cannot be made
  writable again; on the host backend its torch tensors are private
  copy-on-write mappings: a write to one, in a process of its own, neither
  kills the process (the set's own mapping does: SIGSEGV, checked too) nor
  changes the set.
- Views after the set's close, the writer's views after the seal, and views
  after the client's close are invalidated: they read zeros and never
  crash the interpreter (each in a process of its own: SIGSEGV would be its
  exit status).
- Another key or size is VramError ESTALE, naming the set's size; an open
  while another process writes is EAGAIN with nowait, and otherwise waits
  for the seal.
- A writer that closes before sealing leaves nothing; a second open gives
  the same object; an admin drops a set only once nobody maps it.
- Bad arguments: the key's length and type, names, offsets and shapes
  (integer ranges are tried by test_vram_args.py, for these calls too).

The views' byte checks need numpy (and, on the cuda backend, torch).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vram import HEADER, MIB, REPO, Daemon, host_backend  # noqa: E402
from weights_helpers import fill, pattern, read, sha  # noqa: E402

import vram  # noqa: E402
from vram import _lib  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
except ImportError:
    torch = None

HERE = str(Path(__file__).resolve().parent)
HOST = host_backend()
# Views of this backend's sets can be read here.
CAN_VIEW = numpy is not None and (HOST or (torch is not None
                                           and torch.cuda.is_available()))
NO_VIEW = "needs numpy (and torch with CUDA on the cuda backend)"

# One device of 64 MiB in 2 MiB chunks; weight sets in 4 MiB allocations
# (a 10 MiB set is three of them). Its own address window (the modules of
# this directory share one process under ctest), and this user an admin
# (root always is).
CONFIG = json.dumps({
    "address_window": {"base": "0x340000000000", "size": "1TiB"},
    "devices": [{"id": 0, "capacity": "64MiB", "chunk": "2MiB"}],
    "pool": {"prefill_chunks": 0},
    "weights": {"alloc": "4MiB"},
    "access": {"admin": {"uids": [os.getuid()]}},
})


daemon: Optional[Daemon] = None


def setUpModule() -> None:
    global daemon
    daemon = Daemon(CONFIG)
    daemon.start()


def tearDownModule() -> None:
    if daemon:
        daemon.stop()


def key(tag: str) -> bytes:
    return vram.weights_key("py-test " + tag, "uint8", {"all": [1]}, None)


class Child:
    """A Python process with vram and the helpers, talking over stdin and
    stdout."""

    def __init__(self, body: str) -> None:
        assert daemon
        env = dict(os.environ, VRAM_SOCKET=daemon.sock,
                   PYTHONPATH=os.pathsep.join([str(REPO / "python"), HERE]))
        code = ("import os, sys\nimport vram\nfrom weights_helpers import *\n"
                + textwrap.dedent(body))
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.buf = b""
        self.out: List[str] = []

    def expect(self, prefix: str, timeout: float = 60) -> str:
        """The next line that starts with prefix (the rest of it)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                self.out.append(text)
                if text.startswith(prefix):
                    return text[len(prefix):].strip()
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise AssertionError(f"no '{prefix}' within {timeout} s:\n"
                                     + "\n".join(self.out))
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                got = os.read(fd, 65536)
                if not got:
                    rc = self.proc.wait()
                    raise AssertionError(f"the child ended (rc {rc}) before "
                                         f"'{prefix}':\n" + "\n".join(self.out)
                                         + self.buf.decode(errors="replace"))
                self.buf += got

    def say(self, line: str = "") -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> int:
        """Its exit status, once it ended (-11: SIGSEGV)."""
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        self.out += (self.buf + rest).decode(errors="replace").splitlines()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def text(self) -> str:
        return "\n".join(self.out)


# Every set a test makes: dropped after each test, so that a failed test
# leaves nothing for the next one.
NAMES = ("py/shared", "py/wait", "py/ro", "py/cow", "py/stale", "py/layout",
         "py/rules", "py/kept", "py/bad")


def drop_all() -> None:
    """Drops every set of NAMES, waiting (10 s at most) for the processes
    that map one to be gone."""
    assert daemon
    deadline = time.monotonic() + 10
    with vram.Client(daemon.sock, name="py-weights-cleanup") as admin:
        for name in NAMES:
            while True:
                try:
                    admin.admin_weights_drop(name)
                except vram.VramError as e:
                    if e.errno == errno.EBUSY and time.monotonic() < deadline:
                        time.sleep(0.05)
                        continue
                    if e.errno not in (errno.ENOENT, errno.EBUSY):
                        raise
                break


class WeightsTest(unittest.TestCase):
    def setUp(self) -> None:
        assert daemon
        self.c = vram.Client(daemon.sock, name="py-" + self._testMethodName)
        self.addCleanup(drop_all)       # after the close, below
        self.addCleanup(self.c.close)

    def child(self, body: str) -> Child:
        ch = Child(body)
        self.addCleanup(ch.kill)
        return ch

    def status(self) -> dict:
        assert daemon
        with vram.Client(daemon.sock, name="py-weights-ctl", ctl=True) as ctl:
            return ctl.status()

    def written(self, name: str, nbytes: int, seed: int) -> vram.Weights:
        """Set name written by this client with pattern(nbytes, seed) and
        sealed."""
        w = self.c.weights_open(name, 0, nbytes, key(name))
        self.assertTrue(w.writer and not w.sealed, w)
        fill(w, pattern(nbytes, seed))
        w.seal()
        return w


class TestKey(unittest.TestCase):
    def test_the_key_of_a_description(self) -> None:
        k = vram.weights_key("qwen3-30b", "bfloat16",
                             {"attn": (4, 256, 256), "router": [256, 16]},
                             {"layers": [0, 23]})
        self.assertIsInstance(k, bytes)
        self.assertEqual(len(k), 32)
        # The documented canonical form: sorted keys, no spaces, ASCII.
        canon = ('{"dtype":"bfloat16","model":"qwen3-30b","shapes":{"attn":'
                 '[4,256,256],"router":[256,16]},"split":{"layers":[0,23]}}')
        self.assertEqual(k, hashlib.sha256(canon.encode()).digest())
        # Dict order does not matter; every part does.
        self.assertEqual(k, vram.weights_key(
            "qwen3-30b", "bfloat16", {"router": [256, 16], "attn": [4, 256, 256]},
            {"layers": [0, 23]}))
        others = [vram.weights_key("qwen3-30b-2", "bfloat16", {"attn": [4, 256, 256],
                                   "router": [256, 16]}, {"layers": [0, 23]}),
                  vram.weights_key("qwen3-30b", "float16", {"attn": [4, 256, 256],
                                   "router": [256, 16]}, {"layers": [0, 23]}),
                  vram.weights_key("qwen3-30b", "bfloat16", {"attn": [4, 256, 255],
                                   "router": [256, 16]}, {"layers": [0, 23]}),
                  vram.weights_key("qwen3-30b", "bfloat16", {"attn": [4, 256, 256],
                                   "router": [256, 16]}, {"layers": [24, 47]})]
        self.assertEqual(len(set(others + [k])), 5)
        with self.assertRaises(TypeError):
            vram.weights_key("m", "f32", {"a": object()})
        if numpy is not None:  # numpy integers are the ints they stand for
            self.assertEqual(vram.weights_key("m", "f32", [numpy.int64(3)]),
                             vram.weights_key("m", "f32", [3]))
        if torch is not None:  # a dtype is written as str(dtype)
            self.assertEqual(vram.weights_key("m", torch.float32, [1]),
                             vram.weights_key("m", "torch.float32", [1]))

    def test_constants_are_vram_h(self) -> None:
        text = HEADER.read_text()
        for name in ("VRAM_WEIGHTS_KEY_BYTES", "VRAM_WEIGHTS_NAME_MAX",
                     "VRAM_WEIGHTS_NOWAIT", "VRAM_WEIGHTS_KEEP"):
            m = re.search(rf"#define {name} (\w+)", text)
            self.assertIsNotNone(m, name)
            self.assertEqual(getattr(_lib, name), int(m.group(1).rstrip("uU"), 0), name)


@unittest.skipUnless(CAN_VIEW, NO_VIEW)
class TestShare(WeightsTest):
    def test_writer_seal_reader_in_another_process(self) -> None:
        n = 10 * MIB
        w = self.c.weights_open("py/shared", 0, n, key("py/shared"))
        self.assertEqual((w.writer, w.sealed, w.nbytes, w.device), (True, False, n, 0))
        self.assertEqual((w.alloc_bytes, w.allocs), (4 * MIB, 3))
        self.assertNotEqual(w.base, 0)
        self.assertIn("writing", repr(w))
        self.assertEqual(self.status()["devices"][0]["weights_bytes"], 12 * MIB)
        data = pattern(n, 1)
        fill(w, data)
        w.seal()
        self.assertEqual((w.writer, w.sealed), (False, True))
        self.assertEqual(sha(read(w)), sha(data))
        hits = self.status()["counters"]["weights_hits"]
        ch = self.child(f'''
c = vram.Client(os.environ["VRAM_SOCKET"], name="py-weights-reader")
w = c.weights_open("py/shared", 0, {n}, bytes.fromhex("{key("py/shared").hex()}"))
print("info", int(w.writer), int(w.sealed), w.base, w.allocs, flush=True)
print("sha", sha(read(w)), flush=True)
w.close()
c.close()
''')
        self.assertEqual(ch.expect("info "), f"0 1 {w.base} 3")
        self.assertEqual(ch.expect("sha "), sha(data))
        self.assertEqual(ch.finish(), 0, ch.text())
        st = self.status()
        self.assertEqual(st["counters"]["weights_hits"], hits + 1)
        # One copy for both.
        self.assertEqual(st["devices"][0]["weights_bytes"], 12 * MIB)
        w.close()
        self.assertTrue(w.closed)
        w.close()  # idempotent
        # Cached: the next open maps it again, the bytes intact.
        with self.c.weights_open("py/shared", 0, n, key("py/shared")) as again:
            self.assertFalse(again.writer)
            self.assertEqual(sha(read(again)), sha(data))
        self.assertTrue(again.closed)
        self.c.admin_weights_drop("py/shared")

    def test_an_open_waits_for_the_writers_seal(self) -> None:
        n = 6 * MIB
        ch = self.child(f'''
c = vram.Client(os.environ["VRAM_SOCKET"], name="py-weights-writer")
w = c.weights_open("py/wait", 0, {n}, bytes.fromhex("{key("py/wait").hex()}"))
print("writing", int(w.writer), flush=True)
sys.stdin.readline()
fill(w, pattern({n}, 7))
w.seal()
print("sealed", flush=True)
sys.stdin.readline()
c.close()
''')
        self.assertEqual(ch.expect("writing "), "1")
        with self.assertRaises(vram.VramError) as cm:
            self.c.weights_open("py/wait", 0, n, key("py/wait"), nowait=True)
        self.assertEqual(cm.exception.errno, errno.EAGAIN)
        self.assertIn("being written", cm.exception.message)
        # Without nowait the open waits (vramd says so) until the seal.
        got: List[object] = []

        def opener() -> None:
            assert daemon
            try:
                with vram.Client(daemon.sock, name="py-weights-waiter") as c2:
                    w2 = c2.weights_open("py/wait", 0, n, key("py/wait"))
                    got.append((w2.writer, w2.sealed, sha(read(w2))))
            except BaseException as e:  # noqa: BLE001
                got.append(e)

        t = threading.Thread(target=opener)
        t.start()
        assert daemon
        deadline = time.monotonic() + 30
        while "open of weight set 'py/wait' waits" not in daemon.log_text():
            self.assertLess(time.monotonic(), deadline, "the open does not wait")
            self.assertTrue(t.is_alive(), got)
            time.sleep(0.02)
        ch.say()
        ch.expect("sealed")
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(got, [(False, True, sha(pattern(n, 7)))])
        ch.say()
        self.assertEqual(ch.finish(), 0, ch.text())
        self.c.admin_weights_drop("py/wait")

    def test_sealed_views_are_read_only(self) -> None:
        n = 6 * MIB
        w = self.written("py/ro", n, 3)
        if HOST:
            a = w.array("uint32", shape=(n // 4 // 1024, 1024))
            self.assertFalse(a.flags.writeable)
            with self.assertRaises(ValueError):
                a[0, 0] = 1
            with self.assertRaises(ValueError):
                a.flags.writeable = True
            with self.assertRaises(ValueError):
                a[1:].setflags(write=True)
            self.assertEqual(a.tobytes(), pattern(n, 3))
        else:
            with self.assertRaises(NotImplementedError):
                w.array()
        self.assertEqual(sha(read(w)), sha(pattern(n, 3)))
        w.close()
        self.c.admin_weights_drop("py/ro")

    @unittest.skipUnless(HOST and torch is not None,
                         "the host backend's torch tensors (needs torch)")
    def test_a_write_to_a_sealed_tensor_is_private(self) -> None:
        n = 6 * MIB
        w = self.written("py/cow", n, 5)
        k = key("py/cow").hex()
        ch = self.child(f'''
import torch
c = vram.Client(os.environ["VRAM_SOCKET"], name="py-weights-cow")
w = c.weights_open("py/cow", 0, {n}, bytes.fromhex("{k}"))
t = w.tensor(torch.int32, shape=({n} // 4,))
first = int(t[0])
t.add_(1)                     # torch has no read-only tensors
t[5 * (1 << 20) // 4] = -1    # a write into the second allocation too
print("wrote", int(t[0]) - first, flush=True)
# This process's own copy of the pages: its other views show it too.
a = w.array("int32")
assert int(a[0]) == first + 1 and int(a[5 * (1 << 20) // 4]) == -1
assert c.view_valid(t)
w.close()
assert not c.view_valid(t) and int(t.sum()) == 0
w = c.weights_open("py/cow", 0, {n}, bytes.fromhex("{k}"))
print("sha", sha(read(w)), flush=True)   # mapped anew: the set's bytes
print("ok", flush=True)
''')
        self.assertEqual(ch.expect("wrote "), "1")
        self.assertEqual(ch.expect("sha "), sha(pattern(n, 5)))
        ch.expect("ok")
        rc = ch.finish()
        self.assertNotEqual(rc, -11, "SIGSEGV:\n" + ch.text())
        self.assertEqual(rc, 0, ch.text())
        self.assertEqual(sha(read(w)), sha(pattern(n, 5)), "the set changed")
        # What the private mapping spares it: a write to the set's own
        # (read-only) mapping kills the process.
        ch = self.child(f'''
import ctypes
c = vram.Client(os.environ["VRAM_SOCKET"], name="py-weights-segv")
w = c.weights_open("py/cow", 0, {n}, bytes.fromhex("{k}"))
print("writing", flush=True)
ctypes.memset(w.base, 1, 1)
print("it went through", flush=True)
''')
        ch.expect("writing")
        self.assertEqual(ch.finish(), -11, ch.text())
        self.assertEqual(sha(read(w)), sha(pattern(n, 5)))
        w.close()
        # The killed reader's use goes once its process is reaped.
        deadline = time.monotonic() + 30
        while True:
            try:
                self.c.admin_weights_drop("py/cow")
                break
            except vram.VramError as e:
                self.assertEqual(e.errno, errno.EBUSY, e)
                self.assertLess(time.monotonic(), deadline, str(e))
                time.sleep(0.05)


@unittest.skipUnless(HOST and numpy is not None,
                     "stale views are made safe on the host backend (needs numpy)")
class TestStaleViews(WeightsTest):
    def scenario(self, body: str) -> None:
        ch = self.child('''
import errno
import numpy as np

def stale(c, v, why):
    assert not c.view_valid(v), "the view is still valid"
    try:
        c.check_view(v)
    except vram.VramError as e:
        assert e.errno == errno.ESTALE and why in str(e), (why, str(e))
    else:
        raise AssertionError("check_view did not raise")

c = vram.Client(os.environ["VRAM_SOCKET"], name="py-weights-stale")
''' + textwrap.dedent(body) + '\nprint("ok", flush=True)\n')
        rc = ch.finish()
        self.assertNotEqual(rc, -11, "the interpreter died of SIGSEGV:\n" + ch.text())
        self.assertEqual(rc, 0, ch.text())
        self.assertTrue(ch.text().rstrip().endswith("ok"), ch.text())

    def test_close_seal_and_client_close(self) -> None:
        k = key("py/stale").hex()
        self.scenario(f'''
w = c.weights_open("py/stale", 0, 10 * (1 << 20), bytes.fromhex("{k}"))
early = w.array("uint32")
early[:] = 9
w.seal()                       # its writable views go
assert int(early[::1024].sum()) == 0
early[:] = 1                   # lands in the view's own zero pages
stale(c, early, "seal() of weight set 'py/stale'")
sealed = w.array("uint32", shape=(1024,), offset=(1 << 22) - 2048)
assert int(sealed[0]) == 9 and int(sealed[-1]) == 9 and c.view_valid(sealed)
w.close()
assert int(sealed.sum()) == 0
stale(c, sealed, "close() of weight set 'py/stale'")
try:
    w.array()
except ValueError as e:
    assert "closed" in str(e)
else:
    raise AssertionError("a view of a closed set")
w = c.weights_open("py/stale", 0, 10 * (1 << 20), bytes.fromhex("{k}"))
last = w.array()[-4096:]
assert int(last[-1]) == 0 and int(last[0]) == 9  # 10 MiB of 9s, as uint32
c.close()
assert int(last.sum()) == 0
stale(c, last, "close()")
assert w.closed
''')
        self.c.admin_weights_drop("py/stale")


class TestRules(WeightsTest):
    def test_another_layout_is_estale(self) -> None:
        w = self.c.weights_open("py/layout", 0, 4 * MIB, key("py/layout"))
        w.seal()
        with self.assertRaises(vram.VramError) as cm:
            self.c.weights_open("py/layout", 0, 4 * MIB, key("another"))
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        self.assertIn("4 MiB on device 0", cm.exception.message)
        self.assertEqual(cm.exception.call, "vram_weights_open")
        with self.assertRaises(vram.VramError) as cm:
            self.c.weights_open("py/layout", 0, 6 * MIB, key("py/layout"))
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        w.close()
        self.c.admin_weights_drop("py/layout")

    def test_unsealed_close_second_open_and_drop(self) -> None:
        w = self.c.weights_open("py/rules", 0, 2 * MIB, key("py/rules"))
        self.assertIs(self.c.weights_open("py/rules", 0, 2 * MIB, key("py/rules")), w)
        if CAN_VIEW:
            fill(w, pattern(2 * MIB, 9))
        w.close()   # before its seal: dropped
        self.assertEqual(self.status()["devices"][0]["weights_bytes"], 0)
        with self.assertRaises(vram.VramError) as cm:
            self.c.admin_weights_drop("py/rules")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        w = self.c.weights_open("py/rules", 0, 2 * MIB, key("py/rules"))
        self.assertTrue(w.writer)
        if CAN_VIEW and HOST:  # (the cuda driver's fresh memory need not be zeros)
            self.assertEqual(read(w), bytes(2 * MIB), "not a new set of zeros")
        w.seal()
        with self.assertRaises(vram.VramError) as cm:
            w.seal()
        self.assertEqual(cm.exception.errno, errno.EALREADY)
        with self.assertRaises(vram.VramError) as cm:
            self.c.admin_weights_drop("py/rules")
        self.assertEqual(cm.exception.errno, errno.EBUSY)
        self.assertIn("mapped by 1 client", cm.exception.message)
        w.close()
        self.c.admin_weights_drop("py/rules")
        self.assertEqual(self.status()["devices"][0]["weights_bytes"], 0)
        # keep (admins): sealed, closed, still there; dropped by an admin.
        with self.c.weights_open("py/kept", 0, 2 * MIB, key("py/kept"), keep=True) as k:
            k.seal()
        self.assertEqual(self.status()["devices"][0]["weights_cached_bytes"], 2 * MIB)
        self.c.admin_weights_drop("py/kept")

    def test_bad_arguments(self) -> None:
        good = key("py/bad")
        for bad, exc in ((good[:31], ValueError), (good + b"x", ValueError),
                         (good.hex(), TypeError), (None, TypeError),
                         (12, TypeError)):
            with self.subTest(key=bad):
                with self.assertRaises(exc) as cm:
                    self.c.weights_open("py/bad", 0, MIB, bad)  # type: ignore[arg-type]
                self.assertIn("key", str(cm.exception))
        self.c.weights_open("py/bad", 0, MIB, bytearray(good)).close()
        with self.assertRaises(ValueError):
            self.c.weights_open("py/\0bad", 0, MIB, good)
        for name in ("has space", "", "x" * 65):
            with self.subTest(name=name):
                with self.assertRaises(vram.VramError) as cm:
                    self.c.weights_open(name, 0, MIB, good)
                self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(vram.VramError) as cm:
            self.c.weights_open("py/bad", 7, MIB, good)
        self.assertEqual(cm.exception.errno, errno.ENODEV)
        with self.assertRaises(vram.VramError) as cm:
            self.c.weights_open("py/bad", 0, 1 << 30, good)
        self.assertIn(cm.exception.errno, (errno.E2BIG, errno.ENOSPC))
        with self.assertRaises(OverflowError):
            self.c.weights_open("py/bad", 2**32, MIB, good)
        w = self.c.weights_open("py/bad", 0, 3 * MIB, good)
        view = w.array if HOST else w.tensor
        if CAN_VIEW:
            for args, what in (({"offset": 3 * MIB}, "past the set"),
                               ({"offset": 3 * MIB - 2, "shape": [4]}, "go past"),
                               ({"shape": [0]}, "no bytes")):
                with self.subTest(args=args):
                    with self.assertRaises(ValueError) as cm:
                        view(**args)
                    self.assertIn(what, str(cm.exception))
            if HOST:
                with self.assertRaises(ValueError) as cm:
                    w.array("uint32", offset=2)
                self.assertIn("multiple of the item size", str(cm.exception))
        with self.assertRaises(OverflowError):
            view(offset=2**64)
        with self.assertRaises(ValueError):
            view(shape=[2, -1])
        w.close()
        with self.assertRaises(ValueError):
            w.seal()
        self.assertEqual(self.status()["devices"][0]["weights_bytes"], 0)


@unittest.skipUnless(CAN_VIEW, NO_VIEW)
class TestStageWeights(unittest.TestCase):
    """A configured stage whose fixed reservation a keyed set backs:
    stage_register opens it (this client writes it the first time, a later
    registration maps it sealed) and stage_release closes it."""

    def test_registration_opens_the_configured_set(self) -> None:
        k = key("py/stage")
        config = json.dumps({
            "address_window": {"base": "0x360000000000", "size": "1TiB"},
            "devices": [{"id": 0, "capacity": "64MiB", "chunk": "2MiB"}],
            "pool": {"prefill_chunks": 0},
            "weights": {"alloc": "4MiB"},
            "stages": [{"id": 0, "device": 0, "first_layer": 0, "last_layer": 3,
                        "kv_lanes": [16], "expert_slot": "2MiB",
                        "fixed": [{"name": "weights", "bytes": "8MiB",
                                   "set": "py/stage0", "key": k.hex()},
                                  {"name": "other", "bytes": "2MiB",
                                   "set": "py/stage0-other"}]}],
        })
        d = Daemon(config)
        d.start()
        try:
            data = pattern(8 * MIB, 5)
            with vram.Client(d.sock, name="py-stage-writer") as c:
                c.stage_register(0)
                w = c.stage_weights(0, "weights")
                self.assertEqual((w.writer, w.sealed, w.nbytes), (True, False, 8 * MIB))
                fill(w, data)
                w.seal()
                with self.assertRaises(vram.VramError) as e:
                    c.stage_weights(0, "other")
                self.assertEqual(e.exception.errno, errno.ENODATA)
                with self.assertRaises(vram.VramError) as e:
                    c.stage_weights(0, "nothing")
                self.assertEqual(e.exception.errno, errno.ENOENT)
                c.stage_release(0)
                self.assertTrue(w.closed)
            with vram.Client(d.sock, name="py-stage-reader") as c:
                c.stage_register(0)
                w = c.stage_weights(0, "weights")
                self.assertEqual((w.writer, w.sealed), (False, True))
                self.assertEqual(sha(read(w)), sha(data))
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
