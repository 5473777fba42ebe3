# SPDX-License-Identifier: Apache-2.0
"""A view outlives nothing it points into: numpy views and torch tensors
used after the memory under them went -- a trim, a shrink, a release, a
move, a close, an EXPERT_SHRINK or a RECALL (on the event thread, and
through dispatch) -- never crash the interpreter (host backend).

Each misuse runs in a process of its own, against a vramd of its own, and
touches the stale view before anything else: a segmentation fault there is
the process's exit status -11.  Then it asserts what docs/python.md
documents: the view reads zeros and its writes reach no memory of vramd's (the memory it
showed, still mapped at the region's address when it stayed, keeps its
bytes: what is written lands in the view's own zero pages), Client.view_valid says False, Client.check_view raises VramError
ESTALE naming what took the memory, and a view made anew is good.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vram import REPO, Daemon, host_backend  # noqa: E402

try:
    import numpy  # noqa: F401
except ImportError:
    numpy = None
try:
    import torch  # noqa: F401
except ImportError:
    torch = None

PRELUDE = '''
import ctypes, errno, os, select, sys, threading, time
import numpy as np
import vram
MIB = 1 << 20
sock = os.environ["VRAM_SOCKET"]

def stale(c, v, why):
    assert not c.view_valid(v), "the view is still valid"
    try:
        c.check_view(v)
    except vram.VramError as e:
        assert e.errno == errno.ESTALE, e
        assert why in str(e), (why, str(e))
    else:
        raise AssertionError("check_view did not raise")

def touch(v):
    """Reads, then writes, the whole view; what it read (the sum)."""
    got = int(v.sum())
    v[:] = 0xEE if v.dtype == np.uint8 else 1
    assert int(v.sum()) > 0  # the write stays in the view's own zero pages
    print("touched", flush=True)
    return got

def engine(name):
    c = vram.Client(sock, name=name)
    info = c.stage_register(0)
    return c, info
'''

SCENARIOS = {
    # KV beyond the initial window, given back by kv_trim; a view within
    # the window stays good.
    "trim": '''
c, info = engine("trim")
kv = info.kv_region
c.kv_reserve(0, 65536, 1024)
big = c.lane_view(kv, 0)
small = c.lane_view(kv, 0, 0, 2)
assert big.nbytes == 9 * 2 * MIB and small.nbytes == 2 * 2 * MIB
big[:] = 7
assert int(small[0]) == 7 and int(small[-1]) == 7
c.kv_trim(0)
assert touch(big[::4096]) == 0, "a stale view reads zeros"
assert int(small[0]) == 7 and int(small[-1]) == 7, "the window kept its bytes"
base = c.region_info(kv).base
assert ctypes.string_at(base, 2) == b"\\x07\\x07", "the region kept its bytes"
assert c.view_valid(small) and c.view_valid(small[10:])
stale(c, big, "kv_trim(0)")
stale(c, big[100:], "kv_trim(0)")
assert c.lane_view(kv, 0).nbytes == 2 * 2 * MIB
c.close()
''',
    "stage_release": '''
c, info = engine("release")
v = c.lane_view(info.kv_region, 1)
v[:] = 3
c.stage_release(0)
assert touch(v) == 0
stale(c, v, "stage_release(0)")
c.close()
''',
    "close": '''
c, info = engine("close")
v = c.lane_view(info.kv_region, 0, dtype="uint32")
v[:] = 9
c.close()
assert touch(v) == 0
stale(c, v, "close()")
''',
    # The engine's own reserve takes its top loans into KV; its handler
    # keeps the views it was told to drop.
    "expert_shrink": '''
c, info = engine("shrink")
kept = []
c.on_event = lambda ev: kept.append(ev.type)
assert c.expert_request(0).expert_slots_backed == 79
low, high = c.expert_slot_view(0, 0), c.expert_slot_view(0, 78)
low[:] = 5
high[:] = 6
c.kv_reserve(0, 65536, 1024)
assert vram.EventType.EXPERT_SHRINK in kept
assert touch(high) == 0
assert int(low[0]) == 5 and int(low[-1]) == 5 and c.view_valid(low)
stale(c, high, "an EXPERT_SHRINK of expert slots [72, 79) of stage 0")
c.close()
''',
    # Another engine's long prompt recalls loans; the library's event
    # thread answers at once while a thread of this one reads the view.
    "recall_event_thread": '''
c, info = engine("recall-a")
assert c.expert_request(0).expert_slots_backed == 79
v = c.expert_slot_view(0, 78)
v[:] = 1
c.start_event_thread()
stop, reads = threading.Event(), [0]
def reader():
    while not stop.is_set():
        int(v[::65536].sum())
        reads[0] += 1
t = threading.Thread(target=reader)
t.start()
while reads[0] == 0:  # reading before the recall comes
    time.sleep(0.001)
b = vram.Client(sock, name="recall-b")
b.stage_register(1)
b.kv_reserve(1, 65536, 1024)
stop.set()
t.join()
assert touch(v) == 0
stale(c, v, "a RECALL of expert slots [74, 79) of stage 0")
assert c.expert_residency(0).expert_slots_backed == 74
b.close()
c.close()
''',
    "recall_dispatch": '''
c, info = engine("recall-a")
assert c.expert_request(0).expert_slots_backed == 79
v = c.expert_slot_view(0, 78)
b = vram.Client(sock, name="recall-b")
def register_and_grow():
    b.stage_register(1)
    b.kv_reserve(1, 65536, 1024)
t = threading.Thread(target=register_and_grow)
t.start()
deadline = time.monotonic() + 30
while t.is_alive() and time.monotonic() < deadline:
    if select.select([c.fileno()], [], [], 0.05)[0]:
        c.dispatch()
t.join()
assert b.stage_info(1).stage == 1
assert touch(v) == 0
stale(c, v, "a RECALL of expert slots [74, 79) of stage 0")
b.close()
c.close()
''',
    # Ad-hoc regions: a shrink takes the top chunk, a move takes the chunk
    # away from its slot, a release takes the rest.
    "adhoc": '''
c = vram.Client(sock, name="adhoc")
s = c.stage_register_adhoc(0, 0, 0)
r = c.region_create(s, vram.RegionKind.FIXED, 3 * 2 * MIB)
x = c.region_create(s, vram.RegionKind.FIXED, 2 * MIB)
c.region_grow(r, 3)
lo, hi, mid = c.lane_view(r, 0, 0, 1), c.lane_view(r, 0, 2, 1), c.lane_view(r, 0, 1, 1)
lo[:] = 1
mid[:] = 2
hi[:] = 3
c.region_shrink(r, 1)
assert touch(hi) == 0
stale(c, hi, "region_shrink(")
assert c.view_valid(lo) and int(lo[0]) == 1
c.region_move_chunk(r, 0, 1, x, 0, 0)
assert touch(mid) == 0
stale(c, mid, "region_move_chunk")
moved = c.lane_view(x, 0)
assert int(moved[0]) == 2 and int(moved[-1]) == 2, "the chunk kept its bytes"
c.region_release(r)
assert touch(lo) == 0
stale(c, lo, "region_release(")
assert c.view_valid(moved)
c.close()
''',
}

TORCH_SCENARIOS = {
    "torch_trim_and_shrink": '''
import torch
c, info = engine("torch")
kv = info.kv_region
assert c.expert_request(0).expert_slots_backed == 79
e78 = c.expert_slot_tensor(0, 78, dtype=torch.float32)
e78.fill_(2.0)
c.kv_reserve(0, 65536, 1024)  # EXPERT_SHRINK of slots [72, 79)
t = c.lane_tensor(kv, 0, dtype=torch.float32)
window = c.lane_tensor(kv, 0, 0, 2)
t.fill_(1.0)
c.kv_trim(0)
got = (float(t.sum()), float(e78.sum()))
t.fill_(5.0)
e78.add_(1.0)
print("touched", flush=True)
assert got == (0.0, 0.0), got
stale(c, t, "kv_trim(0)")
stale(c, e78, "an EXPERT_SHRINK")
assert c.view_valid(window) and bool((window.view(torch.float32) == 1.0).all())
c.close()
stale(c, window, "close()")
assert float(window.sum()) == 0.0
''',
}


@unittest.skipUnless(host_backend(), "stale views are made safe on the host backend")
@unittest.skipIf(numpy is None, "numpy is not installed")
class TestStaleViews(unittest.TestCase):
    def run_scenario(self, name: str, body: str) -> None:
        d = Daemon()
        d.start()
        self.addCleanup(d.stop)
        env = dict(os.environ, VRAM_SOCKET=d.sock,
                   PYTHONPATH=str(REPO / "python"))
        code = PRELUDE + textwrap.dedent(body) + '\nprint("ok", flush=True)\n'
        r = subprocess.run([sys.executable, "-c", code], env=env,
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, -11,
                            f"{name}: the interpreter died of SIGSEGV:\n{out}")
        self.assertEqual(r.returncode, 0, f"{name}:\n{out}")
        self.assertIn("touched", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("ok"), out)
        # No view kept memory that went back (vramd looks for it).
        import vram
        with vram.Client(d.sock, name="py-stale-check", ctl=True) as ctl:
            st = ctl.status()
        self.assertEqual(st["counters"]["kept_after_release"], 0)
        self.assertEqual(st["counters"]["recalls_missed"], 0)

    def test_trim(self) -> None:
        self.run_scenario("trim", SCENARIOS["trim"])

    def test_stage_release(self) -> None:
        self.run_scenario("stage_release", SCENARIOS["stage_release"])

    def test_close(self) -> None:
        self.run_scenario("close", SCENARIOS["close"])

    def test_expert_shrink(self) -> None:
        self.run_scenario("expert_shrink", SCENARIOS["expert_shrink"])

    def test_recall_on_the_event_thread(self) -> None:
        self.run_scenario("recall_event_thread", SCENARIOS["recall_event_thread"])

    def test_recall_through_dispatch(self) -> None:
        self.run_scenario("recall_dispatch", SCENARIOS["recall_dispatch"])

    def test_adhoc_shrink_move_release(self) -> None:
        self.run_scenario("adhoc", SCENARIOS["adhoc"])

    @unittest.skipIf(torch is None, "PyTorch is not installed")
    def test_torch_tensors(self) -> None:
        self.run_scenario("torch", TORCH_SCENARIOS["torch_trim_and_shrink"])


if __name__ == "__main__":
    unittest.main()
