# SPDX-License-Identifier: Apache-2.0
"""Tests of the vram Python package against the real daemon.

Run from the repository root, after ``cmake --build build -j2``::

    python3 -m unittest discover -s tests/python -v

The module starts vramd itself (vramd_helpers.py: $VRAMD_BIN, $VRAM_LIB,
$VRAM_TEST_BACKEND, $VRAM_TEST_KEEP) on a socket in a fresh private
directory, with the configuration of tests/integration/test_engine_contract.c
(so the figures below are that test's), and stops it at the end.  The numpy parts are skipped when numpy is not
importable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import List, Optional
from unittest import mock

import vramd_helpers  # sets sys.path and $VRAM_LIB for vram
from vramd_helpers import REPO

import vram  # noqa: E402
from vram import _lib  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None

NO_NUMPY = "numpy is not installed (apt-get install python3-numpy)"
MIB = 1 << 20
HEADER = REPO / "client" / "include" / "vram.h"

# The configuration of tests/integration/test_engine_contract.c: 128 chunks
# of 2 MiB. Stage 0: lanes of 256 and 128 bytes per token (windows 32 + 16
# chunks, initial 2 + 1), 3 MiB expert slots, 8 MiB of weights. Stage 1: one
# lane (32 chunks, initial 2), 56 MiB of headroom kept unlent. Reserved 84,
# unreserved 44.
CONFIG = (
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"chunk\": \"2MiB\","
    "                \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256, 128], \"expert_slot\": \"3MiB\","
    "   \"fixed\": [{\"name\": \"weights\", \"kind\": \"fixed\", \"bytes\": \"8MiB\"}],"
    "   \"loan\": {\"recall_deadline_ms\": 2000, \"hold_ms\": 3000}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"headroom\": \"56MiB\", \"recall_deadline_ms\": 2000,"
    "             \"hold_ms\": 3000}}]}"
)


class Daemon(vramd_helpers.Daemon):
    """vramd (tests/python/vramd_helpers.py) with CONFIG unless told
    otherwise."""

    def __init__(self, config: str = CONFIG) -> None:
        super().__init__(config)


daemon: Optional[Daemon] = None


def setUpModule() -> None:
    global daemon
    daemon = Daemon()
    daemon.start()


def tearDownModule() -> None:
    if daemon:
        daemon.stop()


def host_backend() -> bool:
    return (os.environ.get("VRAM_TEST_BACKEND") or "host") == "host"


class Seen:
    """What a callback saw: the event, and the library's state inside it."""

    def __init__(self, ev: vram.Event, res: vram.Residency,
                 info: vram.StageInfo, returned: bool, main: bool) -> None:
        self.ev, self.res, self.info = ev, res, info
        self.returned, self.main_thread = returned, main


class EngineTest(unittest.TestCase):
    """A client with stage 0 registered and a recording event handler."""

    def setUp(self) -> None:
        self.seen: List[Seen] = []
        self.lock = threading.Lock()
        self.returned = False
        self.c = self.connect("py-" + self._testMethodName)
        self.addCleanup(self.c.close)
        self.info = self.c.stage_register(0)

    def connect(self, name: str) -> vram.Client:
        assert daemon
        c = vram.Client(daemon.sock, name=name)
        c.on_event = lambda ev, c=c: self.record(c, ev)
        return c

    def record(self, c: vram.Client, ev: vram.Event) -> None:
        s = Seen(ev, c.expert_residency(ev.stage), c.stage_info(ev.stage),
                 self.returned, threading.current_thread() is threading.main_thread())
        with self.lock:
            self.seen.append(s)

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()
            self.returned = False

    def nth(self, type_: vram.EventType, stage: int, i: int = 0) -> Optional[Seen]:
        with self.lock:
            m = [s for s in self.seen if s.ev.type == type_ and s.ev.stage == stage]
        return m[i] if i < len(m) else None

    def count(self, type_: vram.EventType, stage: int) -> int:
        with self.lock:
            return sum(1 for s in self.seen
                       if s.ev.type == type_ and s.ev.stage == stage)

    def agree(self, c: vram.Client, stage: int) -> None:
        """The library's figures agree with the daemon's."""
        info = c.stage_info(stage)
        res = c.expert_residency(stage)
        st = next(s for s in c.status()["stages"] if s["id"] == stage)
        self.assertEqual(info.kv_mapped_bytes, st["kv_mapped_bytes"])
        self.assertEqual(info.expert_loaned_bytes, st["expert_loaned_bytes"])
        self.assertEqual(res.expert_slots_backed, st["expert_slots_backed"])
        self.assertEqual(info.expert_slots_backed, res.expert_slots_backed)

    def loans(self) -> None:
        """All the loans there are: 79 slots, BUDGET_CHANGED told."""
        self.reset()
        res = self.c.expert_request(0)
        self.returned = True
        self.assertEqual(res.expert_slots_backed, 79)

    def kv_region(self) -> int:
        return self.info.kv_region


class TestConnect(unittest.TestCase):
    def test_connect_failure_names_the_socket(self) -> None:
        assert daemon
        path = os.path.join(daemon.dir, "nobody.sock")
        with self.assertRaises(vram.VramError) as cm:
            vram.Client(path, name="nobody")
        e = cm.exception
        self.assertEqual(e.errno, errno.ENOENT)
        self.assertIn(path, e.message)
        self.assertIn(path, str(e))
        self.assertEqual(e.call, "vram_client_connect")
        self.assertIsInstance(e, OSError)

    def test_socket_from_environment(self) -> None:
        assert daemon
        with mock.patch.dict(os.environ, {"VRAM_SOCKET": daemon.sock}):
            with vram.Client(name="py-env") as c:
                self.assertGreater(c.id, 0)

    def test_control_client_and_context_manager(self) -> None:
        assert daemon
        with vram.Client(daemon.sock, name="py-ctl", ctl=True) as c:
            self.assertFalse(c.closed)
            self.assertIn(c.backend, ("host", "cuda"))
            self.assertEqual(len(c.devices()), 1)
            c.ping()
        self.assertTrue(c.closed)
        with self.assertRaises(ValueError):
            c.ping()
        c.close()  # idempotent
        self.assertIn("closed", repr(c))

    def test_dropped_client_is_closed(self) -> None:
        import gc
        assert daemon
        c = vram.Client(daemon.sock, name="py-dropped")
        c.stage_register(1)
        c.on_event = lambda ev: None
        del c
        gc.collect()
        # Its stage was released: another client can take it.
        with vram.Client(daemon.sock, name="py-after") as d:
            self.assertEqual(d.stage_register(1).stage, 1)
            with self.assertRaises(TypeError):
                d.on_event = 42  # type: ignore[assignment]

    def test_from_fd(self) -> None:
        import socket
        assert daemon
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(daemon.sock)
        with vram.Client.from_fd(s.detach(), name="py-fd") as c:
            c.ping()
            self.assertGreaterEqual(c.fileno(), 0)


class TestErrors(unittest.TestCase):
    def test_fields_and_text(self) -> None:
        e = vram.VramError(-errno.E2BIG, "stage 0: too many tokens", call="f")
        self.assertEqual(e.errno, errno.E2BIG)
        self.assertIn("native context", e.strerror)
        self.assertNotIn("Argument list", str(e))
        self.assertIn("native context", str(e))
        self.assertIn("stage 0: too many tokens", str(e))
        self.assertIn("f:", str(e))
        back = pickle.loads(pickle.dumps(e))
        self.assertEqual((back.errno, back.message, back.call),
                         (e.errno, e.message, e.call))
        # No daemon message: the message is vramd's meaning of the code.
        e = vram.VramError(errno.EAGAIN)
        self.assertEqual(e.message, e.strerror)
        self.assertIn("hold", vram.strerror(-errno.EAGAIN))


class TestBinding(unittest.TestCase):
    """vram._lib against vram.h: every function, every struct's layout."""

    def header(self) -> str:
        if not HEADER.exists():
            self.skipTest(f"no {HEADER}")
        return HEADER.read_text()

    def test_every_function_declared(self) -> None:
        text = re.sub(r"/\*.*?\*/", "", self.header(), flags=re.S)
        decls = re.findall(r"VRAM_API\s+([^;]*?)\b(vram_\w+)\s*\(([^)]*)\)\s*;",
                           text, flags=re.S)
        names = {name for _, name, _ in decls}
        self.assertGreater(len(names), 30)
        self.assertEqual(names, set(_lib.PROTOTYPES))
        for ret, name, args in decls:
            restype, argtypes = _lib.PROTOTYPES[name]
            nargs = 0 if args.strip() in ("", "void") else args.count(",") + 1
            self.assertEqual(len(argtypes), nargs, name)
            self.assertEqual(restype is None, ret.strip() == "void", name)
        lib = _lib.load()
        for name, (restype, argtypes) in _lib.PROTOTYPES.items():
            self.assertEqual(getattr(lib, name).argtypes, argtypes, name)

    def test_struct_layout_matches_the_compiler(self) -> None:
        self.header()
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler to compare the layouts with")
        lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"vram.h\"",
                 "int main(void) {"]
        for sname, s in _lib.STRUCTS.items():
            lines.append(f'printf("{sname} - %zu %zu\\n", (size_t)0, sizeof(struct {sname}));')
            for fname, _ in s._fields_:
                lines.append(
                    f'printf("{sname} {fname} %zu %zu\\n", offsetof(struct {sname}, {fname}),'
                    f' sizeof(((struct {sname} *)0)->{fname}));')
        lines.append('printf("enum - %zu %zu\\n", sizeof(enum vram_event_type),'
                     ' sizeof(enum vram_region_kind));')
        lines.append("return 0; }")
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            subprocess.run([cc, "-I", str(HEADER.parent), "-o", exe, src],
                           check=True, capture_output=True)
            out = subprocess.run([exe], check=True, capture_output=True,
                                 text=True).stdout
        for line in out.splitlines():
            sname, fname, a, b = line.split()
            if sname == "enum":
                self.assertEqual(int(a), ctypes.sizeof(_lib.c_enum))
                self.assertEqual(int(b), ctypes.sizeof(_lib.c_enum))
                continue
            s = _lib.STRUCTS[sname]
            if fname == "-":
                self.assertEqual(ctypes.sizeof(s), int(b), f"sizeof {sname}")
            else:
                field = getattr(s, fname)
                self.assertEqual((field.offset, field.size), (int(a), int(b)),
                                 f"{sname}.{fname}")


class TestEngine(EngineTest):
    """The engine contract (test_engine_contract.c) through Python."""

    def test_register(self) -> None:
        self.assertIsInstance(self.info, vram.StageInfo)
        self.assertEqual(self.info.stage, 0)
        self.assertEqual(self.info.kv_mapped_bytes, 6 * MIB)
        self.assertEqual(self.info.expert_slot_bytes, 3 * MIB)
        self.assertNotEqual(self.info.kv_region, 0)
        self.assertNotEqual(self.info.expert_region, 0)
        self.assertEqual(self.c.stage_info(0), self.info)
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage_register(0)
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        self.assertIn("already yours", cm.exception.message)
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage_register(9)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.agree(self.c, 0)

    def test_discovery(self) -> None:
        devs = self.c.devices()
        self.assertEqual(len(devs), 1)
        d = devs[0]
        self.assertIsInstance(d, vram.DeviceInfo)
        self.assertEqual((d.id, d.capacity_bytes, d.chunk_bytes),
                         (0, 256 * MIB, 2 * MIB))
        self.assertEqual(d.backend, self.c.backend)
        ids = self.c.stage_regions(0)
        self.assertEqual(len(ids), 3)
        names = {}
        for r in ids:
            ri = self.c.region_info(r)
            self.assertIsInstance(ri, vram.RegionInfo)
            self.assertEqual(ri.id, r)
            names[ri.kind] = self.c.region_name(r)
            if ri.kind == vram.RegionKind.KV:
                self.assertEqual(r, self.info.kv_region)
                self.assertEqual(self.c.region_lane_slots(r, 0), 32)
                self.assertEqual(self.c.region_lane_slots(r, 1), 16)
                with self.assertRaises(vram.VramError) as cm:
                    self.c.region_lane_slots(r, 2)
                self.assertEqual(cm.exception.errno, errno.ENOENT)
                self.assertEqual(ri.lane_slots, 32)
                self.assertEqual(ri.lanes, 2)
                self.assertEqual(ri.mapped, 3)
                # Lane 0: 2 chunks mapped, lane 1: 1.
                self.assertIsNotNone(self.c.region_chunk(r, 0, 1))
                self.assertIsNone(self.c.region_chunk(r, 0, 2))
                self.assertIsNone(self.c.region_chunk(r, 1, 1))
                self.assertEqual(self.c.region_slot(r, 1, 3),
                                 ri.base + ri.lane_stride + 3 * ri.chunk_bytes)
                self.assertIsNone(self.c.region_slot(r, 2, 0))
        self.assertEqual(names, {vram.RegionKind.KV: "kv",
                                 vram.RegionKind.EXPERT: "expert",
                                 vram.RegionKind.FIXED: "weights"})
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage_regions(7)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("stage 7", cm.exception.message)
        for call in (lambda: self.c.region_info(999),
                     lambda: self.c.region_name(999),
                     lambda: self.c.region_chunk(999, 0, 0)):
            with self.assertRaises(vram.VramError) as cm:
                call()
            self.assertEqual(cm.exception.errno, errno.ENOENT)
            self.assertIn("region 999", cm.exception.message)
        # Expert slots: 256 MiB of region / 3 MiB; slot j at base + j x 3 MiB.
        self.assertEqual(self.c.expert_slots(0), 85)
        ex = self.c.region_info(self.info.expert_region)
        self.assertEqual(self.c.expert_slot(0, 7), ex.base + 7 * 3 * MIB)
        self.assertIsNone(self.c.expert_slot(0, 85))
        self.assertEqual(self.c.chunks_held(), 3)

    def test_expert_request_budget_changed(self) -> None:
        self.loans()
        res = self.c.expert_residency(0)
        self.assertIsInstance(res, vram.Residency)
        # 45 of its window + 44 unreserved + stage 1's idle window beyond
        # its initial one (kept for its registration): 119 chunks.
        self.assertEqual(res.expert_slots_backed, 79)
        self.assertEqual(res.expert_loaned_bytes, 119 * 2 * MIB)
        s = self.nth(vram.EventType.BUDGET_CHANGED, 0)
        self.assertIsNotNone(s, "no BUDGET_CHANGED")
        assert s
        self.assertFalse(s.returned, "BUDGET_CHANGED told after the call returned")
        self.assertTrue(s.main_thread)
        self.assertIsInstance(s.ev, vram.Event)
        self.assertIs(type(s.ev.type), vram.EventType)
        self.assertEqual(s.ev.expert_slots_backed, 79)
        self.assertEqual(s.res.expert_slots_backed, 79)  # the state after, inside
        self.assertEqual(s.ev.residency_version, res.version)
        self.c.ping()
        self.assertEqual(self.count(vram.EventType.BUDGET_CHANGED, 0), 1)
        self.agree(self.c, 0)
        # Claims: backed slots only, EINVAL beyond.
        self.c.expert_claim(0, 3, [78])
        with self.assertRaises(vram.VramError) as cm:
            self.c.expert_claim(0, 3, [79])
        self.assertEqual(cm.exception.errno, errno.EINVAL)

    def test_kv_reserve_expert_shrink(self) -> None:
        self.loans()
        self.reset()
        kr = self.c.kv_reserve(0, 65536, 1024, hold=False)
        self.returned = True
        self.assertIsInstance(kr, vram.KvResult)
        # 73,728 tokens: 9 + 5 chunks, 11 more, moved from the top loans.
        self.assertEqual(kr.recalled_chunks, 11)
        self.assertEqual(kr.kv_mapped_bytes, 14 * 2 * MIB)
        s = self.nth(vram.EventType.EXPERT_SHRINK, 0)
        self.assertIsNotNone(s, "no EXPERT_SHRINK")
        assert s
        self.assertFalse(s.returned)
        self.assertEqual(s.ev.nchunks, 11)
        self.assertEqual(len(s.ev.chunks), 11)
        self.assertTrue(all(isinstance(x, int) for x in s.ev.chunks))
        self.assertEqual(s.ev.slot_first, 72)  # 108 chunks x 2 / 3
        self.assertEqual(s.ev.slot_end, 79)
        self.assertEqual(s.ev.expert_slots_backed, 72)
        self.assertEqual(s.res.expert_slots_backed, 72)
        self.assertEqual(s.info.expert_slots_backed, 72)
        self.assertEqual(s.info.kv_mapped_bytes, 14 * 2 * MIB)
        self.assertEqual(s.res.expert_loaned_bytes, 108 * 2 * MIB)
        b = self.nth(vram.EventType.BUDGET_CHANGED, 0)
        self.assertTrue(b and not b.returned and b.ev.expert_slots_backed == 72)
        self.agree(self.c, 0)

    def test_trim_keeps_pool_loans(self) -> None:
        self.loans()
        self.c.kv_reserve(0, 65536, 1024)
        self.c.kv_trim(0)
        res = self.c.expert_residency(0)
        self.assertEqual(res.expert_loaned_bytes, 119 * 2 * MIB)
        self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 6 * MIB)
        dev = self.c.status()["devices"][0]
        # Free: the weights not grown yet, and stage 1's initial window.
        self.assertEqual(dev["free_bytes"], (4 + 2) * 2 * MIB)
        self.agree(self.c, 0)

    def test_over_the_native_context(self) -> None:
        with self.assertRaises(vram.VramError) as cm:
            self.c.kv_reserve(0, 262144, 1)
        e = cm.exception
        self.assertEqual(e.errno, errno.E2BIG)
        self.assertIn("native context", e.message)
        self.assertIn("native context", str(e))
        self.assertNotIn("Argument list", str(e))
        self.assertEqual(e.call, "vram_kv_reserve")
        self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 6 * MIB)

    def test_exception_in_callback_is_raised_by_the_call(self) -> None:
        class Boom(Exception):
            pass

        def handler(ev: vram.Event) -> None:
            if ev.type == vram.EventType.BUDGET_CHANGED:
                raise Boom(f"slots {ev.expert_slots_backed}")

        self.c.on_event = handler
        try:
            self.c.expert_request(0)
        except Boom as e:
            caught = e
        else:
            self.fail("the handler's exception was not raised by the call")
        self.assertEqual(str(caught), "slots 79")
        # Raised where the handler raised it (the traceback says so).
        tb = caught.__traceback__
        frames = []
        while tb:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        self.assertIn("handler", frames)
        # The call did what it does; the next one does not raise again.
        self.assertEqual(self.c.expert_residency(0).expert_slots_backed, 79)
        self.c.ping()
        self.agree(self.c, 0)

    def test_close_inside_the_callback_is_refused(self) -> None:
        self.c.on_event = lambda ev: self.c.close()
        with self.assertRaises(RuntimeError):
            self.c.expert_request(0)
        self.assertFalse(self.c.closed)
        self.c.ping()

    def test_dispatch_and_fileno(self) -> None:
        fd = self.c.fileno()
        self.assertGreaterEqual(fd, 0)
        with selectors.DefaultSelector() as sel:
            sel.register(self.c, selectors.EVENT_READ)  # uses fileno()
            sel.select(timeout=0)
        self.assertEqual(self.c.dispatch(), 0)  # nothing came: no wait

    def test_status(self) -> None:
        st = self.c.status()
        self.assertIsInstance(st, dict)
        self.assertIn("devices", st)
        self.assertEqual(len(st["devices"]), 1)
        self.assertIn(0, [s["id"] for s in st["stages"]])

    def test_event_thread_answers_recalls(self) -> None:
        self.loans()
        self.c.start_event_thread()
        with self.assertRaises(vram.VramError) as cm:
            self.c.start_event_thread()
        self.assertEqual(cm.exception.errno, errno.EALREADY)
        # B registers at once (its initial window was kept free); its long
        # prompt needs 7 of A's pool loans back while this thread blocks in
        # the reserve; A's event thread answers the recall.
        b = self.connect("py-engine-b")
        self.addCleanup(b.close)
        self.reset()
        bi = b.stage_register(1)
        self.assertEqual(bi.kv_mapped_bytes, 2 * 2 * MIB)
        self.assertIsNone(self.nth(vram.EventType.RECALL, 0))
        r = b.kv_reserve(1, 65536, 1024, hold=True)
        self.assertEqual(r.kv_mapped_bytes, 9 * 2 * MIB)
        s = self.nth(vram.EventType.RECALL, 0)
        self.assertIsNotNone(s, "A saw no recall")
        assert s
        self.assertFalse(s.main_thread, "A's recall was handled on the test's thread")
        self.assertEqual(s.ev.nchunks, 7)
        self.assertEqual(len(s.ev.chunks), 7)
        self.assertEqual((s.ev.slot_first, s.ev.slot_end), (74, 79))
        self.assertEqual(s.res.expert_slots_backed, 74)
        self.assertTrue(0 < s.ev.deadline_ms <= 2000)
        self.c.ping()
        self.agree(self.c, 0)

    def test_background_map(self) -> None:
        # The loans come back from the call before they are mapped; wait()
        # counts what the library thread mapped, and the figures agree.
        self.assertEqual(self.c.wait(), 0)
        self.c.set_background_map(True)
        self.reset()
        res = self.c.expert_request(0)
        self.assertEqual(res.expert_slots_backed, 79)
        self.assertEqual(self.c.wait(), 119)
        self.assertEqual(self.c.wait(), 0)
        self.c.set_background_map(False)
        self.agree(self.c, 0)

    def test_background_kv_reserve_result(self) -> None:
        # With background mapping a reserve returns a PendingKvResult: its
        # fields wait for the reply and say what the blocking call says;
        # a refusal after the call returned is raised by them.
        self.c.set_background_map(True)
        self.addCleanup(self.c.set_background_map, False)
        with self.assertRaises(vram.VramError) as cm:
            self.c.kv_reserve_result(0)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        p = self.c.kv_reserve(0, 8000, 100)
        self.assertIsInstance(p, vram.PendingKvResult)
        self.assertTrue(p.pending)
        got = p.result()
        self.assertFalse(p.pending)
        self.assertEqual(got.kv_needed_bytes, 8100 * 384)
        self.assertEqual(p.kv_mapped_bytes, self.c.stage_info(0).kv_mapped_bytes)
        self.assertGreaterEqual(got.kv_mapped_bytes, got.kv_needed_bytes)
        self.assertEqual(self.c.kv_reserve_result(0), got)
        # A second reserve settles the first before it is sent.
        first = self.c.kv_reserve(0, 9000, 0)
        second = self.c.kv_reserve(0, 20000, 0)
        self.assertFalse(first.pending)
        self.assertEqual(first.kv_needed_bytes, 9000 * 384)
        self.assertEqual(second.kv_needed_bytes, 20000 * 384)
        bad = self.c.kv_reserve(0, 262144, 1)   # past the native context
        self.assertIsInstance(bad, vram.PendingKvResult)
        with self.assertRaises(vram.VramError) as cm:
            bad.kv_mapped_bytes
        self.assertEqual(cm.exception.errno, errno.E2BIG)
        with self.assertRaises(vram.VramError) as cm:
            bad.result()                          # again, the same failure
        self.assertEqual(cm.exception.errno, errno.E2BIG)
        with self.assertRaises(vram.VramError) as cm:
            self.c.wait()                         # said there too, once
        self.assertEqual(cm.exception.errno, errno.E2BIG)
        self.c.set_background_map(False)
        blk = self.c.kv_reserve(0, 20000, 0)
        self.assertEqual((blk.kv_needed_bytes, blk.kv_mapped_bytes),
                         (second.kv_needed_bytes, second.kv_mapped_bytes))
        self.agree(self.c, 0)

    def test_event_thread_exception_is_raised_by_the_next_call(self) -> None:
        self.loans()

        def handler(ev: vram.Event) -> None:
            if ev.type == vram.EventType.RECALL:
                raise KeyError("recall on the event thread")

        self.c.on_event = handler
        self.c.start_event_thread()
        b = self.connect("py-engine-b")
        self.addCleanup(b.close)
        b.stage_register(1)
        # Returns once A released: A's handler ran.
        b.kv_reserve(1, 65536, 1024, hold=True)
        with self.assertRaises(KeyError):
            self.c.ping()
        self.c.ping()
        self.assertEqual(self.c.expert_residency(0).expert_slots_backed, 74)


class TestSleep(EngineTest):
    """Sleep and wake (test_sleep.c) through Python: the bytes come back
    at the same addresses, the memory goes back to vramd meanwhile."""

    def stage(self) -> Dict[str, Any]:
        return next(s for s in self.c.status()["stages"] if s["id"] == 0)

    def free(self) -> int:
        return int(self.c.status()["devices"][0]["free_bytes"])

    def weights(self) -> int:
        return next(r for r in self.c.stage_regions(0)
                    if self.c.region_name(r) == "weights")

    def test_sleep_and_wake_keep_the_bytes(self) -> None:
        if not host_backend():
            self.skipTest("writes the memory from the host")
        kv, w = self.kv_region(), self.weights()
        self.c.region_grow(w, 2)
        ri, wi = self.c.region_info(kv), self.c.region_info(w)
        cb = ri.chunk_bytes
        pattern = bytes(range(256)) * (cb // 256)
        # Lane 0's two slots, lane 1's one, the weights' two.
        places = [ri.base, ri.base + cb, ri.base + ri.lane_stride,
                  wi.base, wi.base + cb]
        for i, addr in enumerate(places):
            ctypes.memmove(addr, pattern[i:] + pattern[:i], cb)
        free = self.free()
        self.c.stage_sleep(0)
        self.assertTrue(self.c.stage_asleep(0))
        st = self.stage()
        self.assertTrue(st["asleep"])
        self.assertEqual(st["host_bytes"], 5 * cb)
        self.assertEqual(st["kv_mapped_bytes"], 0)
        self.assertEqual(self.free(), free + 5 * cb)
        self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 0)
        for call in (lambda: self.c.kv_reserve(0, 100, 0),
                     lambda: self.c.region_grow(w, 1),
                     lambda: self.c.expert_request(0)):
            with self.assertRaises(vram.VramError) as cm:
                call()
            self.assertEqual(cm.exception.errno, errno.EBUSY)
            self.assertIn("asleep", cm.exception.message)
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage_sleep(0)
        self.assertEqual(cm.exception.errno, errno.EALREADY)

        self.c.stage_wake(0)
        self.assertFalse(self.c.stage_asleep(0))
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage_wake(0)
        self.assertEqual(cm.exception.errno, errno.EALREADY)
        self.assertEqual(self.c.region_info(kv).base, ri.base)
        for i, addr in enumerate(places):
            self.assertEqual(ctypes.string_at(addr, cb), pattern[i:] + pattern[:i],
                             f"place {i} lost its bytes")
        st = self.stage()
        self.assertFalse(st.get("asleep", False))
        self.assertEqual((st["sleeps"], st["wakes"]), (1, 1))
        self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 6 * MIB)
        self.agree(self.c, 0)

    def test_discarding_sleep_keeps_the_weights_only(self) -> None:
        w = self.weights()
        self.c.region_grow(w, 1)
        self.c.stage_sleep(0, discard_kv=True, discard_experts=True)
        self.assertEqual(self.stage()["host_bytes"], 2 * MIB)
        self.c.stage_wake(0, keep_host=True)
        self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 6 * MIB)
        # The kept buffer serves the next sleep.
        self.c.stage_sleep(0)
        self.assertEqual(self.stage()["host_bytes"], 8 * MIB)
        self.c.stage_wake(0)
        self.agree(self.c, 0)

    def test_the_stage_object(self) -> None:
        st = self.c.stage(0)
        self.assertIsInstance(st, vram.Stage)
        self.assertEqual((st.id, st.client), (0, self.c))
        self.assertFalse(st.asleep)
        self.assertEqual(st.info(), self.c.stage_info(0))
        self.assertEqual(st.regions(), self.c.stage_regions(0))
        st.sleep(discard_kv=True)
        self.assertTrue(st.asleep)
        self.assertTrue(self.stage()["asleep"])
        st.wake()
        self.assertFalse(st.asleep)
        self.assertEqual(st.info().kv_mapped_bytes, 6 * MIB)
        with self.assertRaises(vram.VramError) as cm:
            self.c.stage(1)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        st.release()
        with self.assertRaises(vram.VramError) as cm:
            st.info()
        self.assertEqual(cm.exception.errno, errno.ENOENT)

    def test_an_unknown_stage(self) -> None:
        for call in (lambda: self.c.stage_sleep(1), lambda: self.c.stage_wake(1),
                     lambda: self.c.stage_asleep(1)):
            with self.assertRaises(vram.VramError) as cm:
                call()
            self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertFalse(self.c.stage_asleep(0))

    def test_views_are_invalidated_by_the_sleep(self) -> None:
        if numpy is None:
            self.skipTest("numpy is not installed (apt-get install python3-numpy)")
        if not host_backend():
            self.skipTest("views are numpy arrays on the host backend")
        kv = self.kv_region()
        v = self.c.lane_view(kv, 0)
        v[:] = 7
        self.c.stage_sleep(0)
        self.assertFalse(self.c.view_valid(v))
        with self.assertRaises(vram.VramError) as cm:
            self.c.check_view(v)
        self.assertIn("stage_sleep(0)", cm.exception.message)
        # Reading it is safe: zero pages, not the memory vramd took back.
        self.assertEqual(int(v.max()), 0)
        self.c.stage_wake(0)
        again = self.c.lane_view(kv, 0)
        self.assertEqual(int(again.min()), 7)
        self.assertFalse(self.c.view_valid(v))


class TestViews(EngineTest):
    """Zero-copy numpy views over mapped memory (host backend)."""

    def setUp(self) -> None:
        super().setUp()
        if not host_backend():
            self.skipTest("views need the host backend")

    def test_views_without_numpy(self) -> None:
        with mock.patch.dict(sys.modules, {"numpy": None}):
            with self.assertRaises(ImportError) as cm:
                self.c.lane_view(self.kv_region(), 0)
            self.assertIn("numpy", str(cm.exception))
            with self.assertRaises(ImportError):
                self.c.expert_slot_view(0, 0)

    def test_cuda_views_not_implemented(self) -> None:
        with mock.patch.object(vram.Client, "backend", new_callable=mock.PropertyMock,
                               return_value="cuda"):
            with self.assertRaises(NotImplementedError) as cm:
                self.c.lane_view(self.kv_region(), 0)
            self.assertIn("torch", str(cm.exception))
            with self.assertRaises(NotImplementedError):
                self.c.expert_slot_view(0, 0)

    @unittest.skipIf(numpy is None, NO_NUMPY)
    def test_lane_view_write_and_read_back(self) -> None:
        kv = self.kv_region()
        ri = self.c.region_info(kv)
        v = self.c.lane_view(kv, 0)  # the mapped prefix: 2 slots
        self.assertEqual(v.nbytes, 2 * ri.chunk_bytes)
        # The view maps the same memory at an address of its own (so that
        # it can outlive it: test_vram_stale_views.py).
        self.assertNotEqual(v.ctypes.data, ri.base)
        self.assertTrue(self.c.view_valid(v))
        self.assertTrue(v.flags.writeable)
        words = self.c.lane_view(kv, 0, dtype="uint32")
        words[:] = numpy.arange(words.size, dtype=numpy.uint32)
        # A second view over slot 1 alone sees the same memory.
        w = self.c.lane_view(kv, 0, first_slot=1, nslots=1, dtype=numpy.uint32)
        self.assertEqual(w.size, ri.chunk_bytes // 4)
        first = ri.chunk_bytes // 4
        self.assertTrue(numpy.array_equal(
            w, numpy.arange(first, first + w.size, dtype=numpy.uint32)))
        # And so does a plain read of the address.
        raw = ctypes.string_at(ri.base + ri.chunk_bytes, 8)
        self.assertEqual(numpy.frombuffer(raw, dtype=numpy.uint32).tolist(),
                         [first, first + 1])
        # Lane 1 is another lane: its one mapped slot.
        l1 = self.c.lane_view(kv, 1)
        self.assertEqual(l1.nbytes, ri.chunk_bytes)
        l1[:] = 0xAB
        self.assertEqual(ctypes.string_at(ri.base + ri.lane_stride, 2), b"\xab\xab")
        self.assertEqual(int(self.c.lane_view(kv, 1, 0, 1)[-1]), 0xAB)
        # The view keeps the client alive, not its memory mapped.
        self.assertIs(v.base._vram_owner, self.c)

    @unittest.skipIf(numpy is None, NO_NUMPY)
    def test_lane_view_never_covers_unmapped_memory(self) -> None:
        kv = self.kv_region()
        for args in ((0, 0, 3), (0, 2, None), (0, 2, 1), (1, 1, None),
                     (1, 0, 2), (0, 31, 2), (0, 40, 1)):
            lane, first, n = args
            with self.subTest(lane=lane, first_slot=first, nslots=n):
                with self.assertRaises(vram.VramError) as cm:
                    self.c.lane_view(kv, lane, first, n)
                self.assertEqual(cm.exception.errno, errno.EFAULT)
        with self.assertRaises(vram.VramError) as cm:
            self.c.lane_view(kv, 5)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(vram.VramError) as cm:
            self.c.lane_view(999, 0)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(ValueError):
            self.c.lane_view(kv, 0, 0, 0)
        with self.assertRaises(ValueError):
            self.c.lane_view(kv, 0, -1)
        with self.assertRaises(ValueError):
            self.c.view_valid(numpy.zeros(4))  # not a view of the client's
        # After a reserve more is mapped, and viewable.
        self.c.kv_reserve(0, 65536, 1024)
        self.assertEqual(self.c.lane_view(kv, 0).nbytes, 9 * 2 * MIB)
        self.assertEqual(self.c.lane_view(kv, 1).nbytes, 5 * 2 * MIB)

    @unittest.skipIf(numpy is None, NO_NUMPY)
    def test_expert_slot_view(self) -> None:
        # Nothing backed yet.
        with self.assertRaises(vram.VramError) as cm:
            self.c.expert_slot_view(0, 0)
        self.assertEqual(cm.exception.errno, errno.EFAULT)
        # 3 chunks of 2 MiB: 2 slots of 3 MiB.
        res = self.c.expert_request(0, max_bytes=6 * MIB)
        self.assertEqual(res.expert_slots_backed, 2)
        v = self.c.expert_slot_view(0, 1, dtype="float32")
        self.assertEqual(v.nbytes, 3 * MIB)
        # Its own mapping of the slot's memory (3 MiB: 1 MiB of the second
        # chunk, all of the third).
        self.assertNotEqual(v.ctypes.data, self.c.expert_slot(0, 1))
        v[:] = numpy.linspace(0, 1, v.size, dtype=numpy.float32)
        again = self.c.expert_slot_view(0, 1, dtype=numpy.float32)
        self.assertTrue(numpy.array_equal(v, again))
        raw = ctypes.string_at(self.c.expert_slot(0, 1) + 3 * MIB - 4, 4)
        self.assertEqual(numpy.frombuffer(raw, dtype=numpy.float32)[0], v[-1])
        self.c.expert_slot_view(0, 0)[:] = 7
        self.assertEqual(int(self.c.expert_slot_view(0, 0)[-1]), 7)
        with self.assertRaises(ValueError):
            self.c.expert_slot_view(0, -1)
        for slot in (2, 84, 85, 2**32 - 1):
            with self.subTest(slot=slot):
                with self.assertRaises(vram.VramError) as cm:
                    self.c.expert_slot_view(0, slot)
                self.assertEqual(cm.exception.errno, errno.EFAULT)
                self.assertIn("not backed", cm.exception.message)


try:
    import torch
except ImportError:
    torch = None


def torch_usable() -> Optional[str]:
    """Why torch tensors cannot be tested here, or None."""
    if torch is None:
        return "PyTorch is not installed"
    if not host_backend() and not torch.cuda.is_available():
        return "the cuda backend without a CUDA device for torch"
    if host_backend() and numpy is None:
        return NO_NUMPY
    return None


class TestTorch(EngineTest):
    """Zero-copy torch tensors: CUDA tensors over the chunks on the cuda
    backend (a CUDA graph captured over the KV replays after every budget
    change), CPU tensors on the host backend."""

    def setUp(self) -> None:
        why = torch_usable()
        if why:
            self.skipTest(why)
        super().setUp()
        self.cuda = not host_backend()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def test_tensors_across_a_sleep(self) -> None:
        """On cuda, a tensor over the KV and a graph captured over it work
        again after the wake, on the bytes the sleep copied out; on host a
        tensor made before the sleep is invalidated (zeros), a new one
        shows the bytes."""
        kv = self.kv_region()
        t = self.c.lane_tensor(kv, 0)
        t.fill_(7)
        graph = None
        if self.cuda:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                t.add_(1)
            graph.replay()
        else:
            t.add_(1)
        self.sync()
        self.c.stage_sleep(0)
        self.assertFalse(self.c.view_valid(t))
        self.c.stage_wake(0)
        if self.cuda:
            self.assertTrue(self.c.view_valid(t))
            graph.replay()
            self.sync()
            self.assertTrue(bool((t == 9).all()))
            # Its chunks are the new ones: a trim that takes them
            # invalidates it as before.
            self.assertEqual(self.c.stage_info(0).kv_mapped_bytes, 6 * MIB)
        else:
            self.assertFalse(self.c.view_valid(t))
            self.assertTrue(bool((self.c.lane_tensor(kv, 0) == 8).all()))
        self.agree(self.c, 0)

    def test_kv_tensor_survives_budget_changes(self) -> None:
        kv = self.kv_region()
        t = self.c.lane_tensor(kv, 0)  # the initial window: 2 chunks
        self.assertEqual(t.numel(), 2 * 2 * MIB)
        self.assertEqual(t.device.type, "cuda" if self.cuda else "cpu")
        t.fill_(7)
        self.sync()
        graph = None
        if self.cuda:
            # Captured once over the KV's fixed address.
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                t.add_(1)
            graph.replay()
        else:
            t.add_(1)
        self.sync()
        self.assertTrue(bool((t == 8).all()))
        # Loans, a long prompt that moves them into KV, a trim: the initial
        # window's memory and address stay.
        self.loans()
        self.c.kv_reserve(0, 65536, 1024)
        big = self.c.lane_tensor(kv, 0)
        self.assertEqual(big.numel(), 9 * 2 * MIB)
        if self.cuda:  # the region's own address (host: a view's own)
            self.assertEqual(big.data_ptr(), t.data_ptr())
        big[t.numel():].fill_(3)
        self.sync()
        self.assertTrue(bool((big[:t.numel()] == 8).all()))
        self.c.kv_trim(0)
        # The trim gave back what big covered beyond the initial window.
        self.assertFalse(self.c.view_valid(big))
        self.assertTrue(self.c.view_valid(t))
        if graph is not None:
            graph.replay()
        else:
            t.add_(1)
        self.sync()
        self.assertTrue(bool((t == 9).all()))
        # Past the trimmed window there is no memory: no tensor over it.
        with self.assertRaises(vram.VramError) as e:
            self.c.lane_tensor(kv, 0, first_slot=2, nslots=1)
        self.assertEqual(e.exception.errno, errno.EFAULT)

    def test_expert_slot_tensor(self) -> None:
        self.loans()
        e0 = self.c.expert_slot_tensor(0, 0, dtype=torch.int32)
        self.assertEqual(e0.numel() * 4, 3 * MIB)
        e0.fill_(12345)
        self.sync()
        # A long prompt takes the top loans; slot 0 keeps its data.
        self.c.kv_reserve(0, 65536, 1024)
        self.assertEqual(self.c.expert_residency(0).expert_slots_backed, 72)
        self.assertTrue(bool((e0 == 12345).all()))
        with self.assertRaises(vram.VramError) as e:
            self.c.expert_slot_tensor(0, 72)
        self.assertEqual(e.exception.errno, errno.EFAULT)


ALLOC_LIB = os.environ.get("VRAM_TORCH_ALLOC") or str(REPO / "build" / "libvram_torch_alloc.so")


class TestTorchAllocator(unittest.TestCase):
    """The PyTorch allocator shim (client/torch/vram_torch_alloc.c): its
    blocks come out of a vramd region at a fixed address, first fit, merged
    when freed, its free tail given back on trim. Through ctypes here; under
    torch.cuda.MemPool with a CUDA graph on the GPU machine."""

    @classmethod
    def setUpClass(cls) -> None:
        if not os.path.exists(ALLOC_LIB):
            raise unittest.SkipTest(f"no allocator shim at {ALLOC_LIB}")
        assert daemon
        os.environ["VRAM_SOCKET"] = daemon.sock
        os.environ["VRAM_TORCH_REGION"] = "64MiB"
        lib = ctypes.CDLL(ALLOC_LIB)
        lib.vram_torch_malloc.restype = ctypes.c_void_p
        lib.vram_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.vram_torch_free.restype = None
        lib.vram_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                        ctypes.c_void_p]
        lib.vram_torch_last_error.restype = ctypes.c_char_p
        lib.vram_torch_trim.restype = ctypes.c_longlong
        lib.vram_torch_region.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                          ctypes.POINTER(ctypes.c_uint64)]
        cls.lib = lib

    def region(self) -> "tuple[int, int]":
        base, mapped = ctypes.c_uint64(), ctypes.c_uint64()
        self.assertEqual(self.lib.vram_torch_region(0, ctypes.byref(base),
                                                    ctypes.byref(mapped)), 0)
        return base.value, mapped.value

    def test_blocks_from_a_vramd_region(self) -> None:
        lib = self.lib
        a = lib.vram_torch_malloc(1000, 0, None)
        self.assertTrue(a, lib.vram_torch_last_error())
        base, mapped = self.region()
        self.assertEqual(mapped, 2 * MIB)  # one chunk backs the first block
        self.assertTrue(base <= a < base + mapped)
        self.assertEqual(a % 512, 0)
        b = lib.vram_torch_malloc(3 * MIB, 0, None)  # grows the region
        self.assertTrue(b, lib.vram_torch_last_error())
        _, mapped = self.region()
        self.assertGreaterEqual(mapped, 1024 + 3 * MIB)
        # vramd sees the allocator's client, its stage and the memory.
        assert daemon
        with vram.Client(daemon.sock, name="py-alloc-check", ctl=True) as ctl:
            st = ctl.status()
            me = [c for c in st["clients"] if c["name"] == "torch-allocator"]
            self.assertEqual(len(me), 1)
            self.assertEqual(me[0]["held_bytes"], mapped)
        # Freed blocks merge and are reused first fit.
        lib.vram_torch_free(a, 1000, 0, None)
        c = lib.vram_torch_malloc(512, 0, None)
        self.assertEqual(c, a)
        lib.vram_torch_free(c, 512, 0, None)
        lib.vram_torch_free(b, 3 * MIB, 0, None)
        # The free tail goes back to vramd.
        given = lib.vram_torch_trim()
        self.assertEqual(given, mapped)
        self.assertEqual(self.region()[1], 0)
        # Too much for the region: NULL, and why.
        self.assertFalse(lib.vram_torch_malloc(65 * MIB, 0, None))
        self.assertIn(b"VRAM_TORCH_REGION", lib.vram_torch_last_error())

    def test_tags_sleep_and_wake(self) -> None:
        """Tags, as torch_memory_saver's: each its own region and stage;
        one with backup keeps its bytes across a sleep, one without has
        them discarded; a sleeping tag allocates nothing."""
        lib = self.lib
        lib.vram_torch_set_tag.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.vram_torch_get_tag.restype = ctypes.c_char_p
        lib.vram_torch_sleep.argtypes = [ctypes.c_char_p]
        lib.vram_torch_wake.argtypes = [ctypes.c_char_p]
        assert daemon
        host = host_backend()

        def mine(st: Dict[str, Any]) -> List[Dict[str, Any]]:
            cid = next(c["id"] for c in st["clients"] if c["name"] == "torch-allocator")
            return [s for s in st["stages"] if s.get("owner") == cid]

        self.assertEqual(lib.vram_torch_set_tag(b"weights", 1), 0)
        self.assertEqual(lib.vram_torch_get_tag(), b"weights")
        w = lib.vram_torch_malloc(MIB, 0, None)
        self.assertTrue(w, lib.vram_torch_last_error())
        self.assertEqual(lib.vram_torch_set_tag(b"kv", 0), 0)
        k = lib.vram_torch_malloc(MIB, 0, None)
        self.assertTrue(k, lib.vram_torch_last_error())
        self.assertNotEqual(w // (64 * MIB), k // (64 * MIB))  # regions of their own
        pattern = bytes(range(256)) * (MIB // 256)
        if host:
            ctypes.memmove(w, pattern, MIB)
        with vram.Client(daemon.sock, name="py-alloc-tags", ctl=True) as ctl:
            before = len(mine(ctl.status()))
            self.assertEqual(lib.vram_torch_sleep(b"weights"), 0)
            self.assertEqual(lib.vram_torch_sleep(b"weights"), -errno.EALREADY)
            asleep = [s for s in mine(ctl.status()) if s.get("asleep")]
            self.assertEqual(len(asleep), 1)
            self.assertEqual(asleep[0]["host_bytes"], 2 * MIB)
            # The sleeping tag allocates nothing; the others do.
            self.assertEqual(lib.vram_torch_set_tag(b"weights", 1), 0)
            self.assertFalse(lib.vram_torch_malloc(512, 0, None))
            self.assertIn(b"sleeps", lib.vram_torch_last_error())
            self.assertEqual(lib.vram_torch_wake(b"weights"), 0)
            self.assertEqual(lib.vram_torch_wake(b"weights"), -errno.EALREADY)
            if host:
                self.assertEqual(ctypes.string_at(w, MIB), pattern)
            # Without backup: nothing copied, the memory back at the wake.
            self.assertEqual(lib.vram_torch_sleep(b"kv"), 0)
            asleep = [s for s in mine(ctl.status()) if s.get("asleep")]
            self.assertEqual(len(asleep), 1)
            self.assertEqual(asleep[0]["host_bytes"], 0)
            self.assertEqual(lib.vram_torch_wake(b"kv"), 0)
            if host:
                ctypes.memmove(k, pattern, MIB)
                self.assertEqual(ctypes.string_at(k, MIB), pattern)
            self.assertFalse(any(s.get("asleep") for s in mine(ctl.status())))
            self.assertEqual(len(mine(ctl.status())), before)
        # A tag keeps its kind; names and counts are bounded.
        self.assertEqual(lib.vram_torch_set_tag(b"kv", 1), -errno.EINVAL)
        self.assertEqual(lib.vram_torch_set_tag(b"x" * 40, 1), -errno.ENAMETOOLONG)
        self.assertEqual(lib.vram_torch_sleep(b"nobody"), -errno.ENOENT)
        lib.vram_torch_free(w, MIB, 0, None)
        lib.vram_torch_free(k, MIB, 0, None)
        self.assertEqual(lib.vram_torch_set_tag(None, 1), 0)
        self.assertEqual(lib.vram_torch_get_tag(), b"")
        self.assertGreaterEqual(lib.vram_torch_trim(), 4 * MIB)

    def test_torch_mem_pool_and_graph(self) -> None:
        """On CUDA: a torch.cuda.MemPool over the shim serves tensors from
        the region, and a CUDA graph over them replays."""
        if host_backend() or torch is None or not torch.cuda.is_available():
            self.skipTest("needs the cuda backend and torch with CUDA")
        if not hasattr(torch.cuda, "MemPool"):
            self.skipTest("this torch has no torch.cuda.MemPool")
        code = f"""
import ctypes, os, sys, torch
alloc = torch.cuda.memory.CUDAPluggableAllocator({ALLOC_LIB!r},
                                                  "vram_torch_malloc", "vram_torch_free")
pool = torch.cuda.MemPool(alloc.allocator())
lib = ctypes.CDLL({ALLOC_LIB!r})
lib.vram_torch_last_error.restype = ctypes.c_char_p
try:
    with torch.cuda.use_mem_pool(pool):
        x = torch.full((1 << 20,), 2.0, device="cuda")
        y = torch.zeros_like(x)
except torch.OutOfMemoryError:
    sys.exit("the shim refused: " + lib.vram_torch_last_error().decode())
base, mapped = ctypes.c_uint64(), ctypes.c_uint64()
assert lib.vram_torch_region(0, ctypes.byref(base), ctypes.byref(mapped)) == 0
assert base.value <= x.data_ptr() < base.value + mapped.value, "x is not in the region"
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y.add_(x)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
assert float(y[0]) == 6.0 and bool((y == 6.0).all()), float(y[0])
# A tag of its own, with backup, in a pool of its own: asleep, its memory
# is vramd's; awake, the graph captured before the sleep replays on the
# bytes that were copied out.
lib.vram_torch_set_tag.argtypes = [ctypes.c_char_p, ctypes.c_int]
lib.vram_torch_sleep.argtypes = [ctypes.c_char_p]
lib.vram_torch_wake.argtypes = [ctypes.c_char_p]
assert lib.vram_torch_set_tag(b"weights", 1) == 0
wpool = torch.cuda.MemPool(alloc.allocator())
with torch.cuda.use_mem_pool(wpool):
    a = torch.full((1 << 20,), 3.0, device="cuda")
    b = torch.zeros_like(a)
assert lib.vram_torch_set_tag(None, 1) == 0
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    b.add_(a)
g2.replay()
torch.cuda.synchronize()
assert lib.vram_torch_sleep(b"weights") == 0, lib.vram_torch_last_error()
assert lib.vram_torch_wake(b"weights") == 0, lib.vram_torch_last_error()
g2.replay()
torch.cuda.synchronize()
assert bool((b == 6.0).all()), float(b[0])
print("ok", hex(x.data_ptr()), mapped.value)
"""
        env = dict(os.environ, VRAM_SOCKET=daemon.sock if daemon else "",
                   VRAM_TORCH_REGION="64GiB")  # clamped to the device
        r = subprocess.run([sys.executable, "-c", code], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("ok", r.stdout)


if __name__ == "__main__":
    unittest.main()
