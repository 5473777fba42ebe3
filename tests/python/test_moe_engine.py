# SPDX-License-Identifier: Apache-2.0
"""examples/moe_engine.py against the real daemon: it decodes token for token
the same as the same model in ordinary memory while budgets change under it.

Each test starts vramd ($VRAMD_BIN, default build/vramd; backend
$VRAM_TEST_BACKEND, host by default) with examples/moe_engine.json on a
socket in a fresh private directory, runs the engine as a process (one
engine with both stages, or two engine processes), and is itself the
second process: at the engine's pauses it registers stage 2 (another
engine on the same device) and reserves stage 2's whole window, which
recalls the loans the engine borrowed out of that window; later it
leaves, and the engine borrows them again. Meanwhile request 2's own
reserve moves expert loans into KV. The reference is the engine's --plain
run in the same process environment (tensors on cuda when the backend is).
The engine keeps its attention and router weights in weight sets: a test
runs it twice against one vramd, and the second start maps the sets the
first one wrote, loads nothing and decodes the same tokens.

    python3 -m unittest discover -s tests/python -p 'test_moe*.py' -v

$VRAM_TEST_KEEP=1 keeps the daemon's directory (its log); $VRAM_MOE_LOG=DIR
writes each engine run's output there.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time
import unittest
from typing import Dict, List, Optional

import vramd_helpers  # sets sys.path and $VRAM_LIB for vram
from vramd_helpers import REPO

import vram  # noqa: E402

ENGINE = REPO / "examples" / "moe_engine.py"
CONFIG = REPO / "examples" / "moe_engine.json"
BACKEND = vramd_helpers.BACKEND
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
TIMEOUT = 300
# A stage's weight set: 2 layers of attention (4 x 256 x 256) and router
# (256 x 16) weights, float32.
SET_BYTES = 2 * (4 * 256 * 256 + 256 * 16) * 4


def tokens_of(out: str) -> Dict[int, str]:
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^tokens (\d+): (.*)$", out, re.M)}


class Daemon(vramd_helpers.Daemon):
    """vramd (tests/python/vramd_helpers.py) with examples/moe_engine.json, started."""

    def __init__(self) -> None:
        super().__init__(config_file=str(CONFIG), prefix="vramd-moe-", name="moe-harness")
        self.start()


class Engine:
    """The engine as a process; lines are read until a pause or its end."""

    def __init__(self, sock: Optional[str], *args: str) -> None:
        cmd = [sys.executable, str(ENGINE), "--device", DEVICE, *args]
        if sock:
            cmd += ["--socket", sock]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.out: List[str] = []

    def until(self, line: str) -> str:
        """Reads up to and including `line`; returns what was read."""
        start = len(self.out)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            got = self.proc.stdout.readline()
            if not got:
                raise AssertionError(f"the engine ended (rc {self.proc.wait()}) "
                                     f"before '{line}':\n" + "".join(self.out))
            self.out.append(got)
            if got.rstrip("\n") == line:
                return "".join(self.out[start:])
        raise AssertionError(f"no '{line}' within {TIMEOUT} s:\n" + "".join(self.out))

    def go(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self) -> str:
        """Reads to the end; returns what was read since the last call."""
        rest, _ = self.proc.communicate(timeout=TIMEOUT)
        self.out.append(rest)
        if self.proc.returncode != 0:
            raise AssertionError(f"the engine exited with {self.proc.returncode}:\n"
                                 + "".join(self.out))
        return rest


reference: Dict[int, str] = {}


def setUpModule() -> None:
    e = Engine(None, "--plain")
    out = e.finish()
    reference.update(tokens_of(out))
    if sorted(reference) != [1, 2, 3, 5] or "request 4: 9000+8 tokens: refused" not in out:
        raise AssertionError("the plain run did not decode requests 1, 2, 3 and 5 "
                             "and refuse request 4:\n" + out)


class MoeEngineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.daemon = Daemon()
        # A failed test keeps vramd's directory (its log).
        self.addCleanup(lambda: self.daemon.stop(check=False, keep=self.failed()))

    def failed(self) -> bool:
        """Whether this test has failed so far (while its cleanups run)."""
        r = self._outcome.result
        return any(t is self for t, _ in r.failures + r.errors)

    def run_with_tenant(self, *engine_args: str) -> Dict[str, str]:
        """Runs the engine with the second process's arrival at request 2's
        8th step and its departure before request 3; returns the output cut
        at those points."""
        e = Engine(self.daemon.sock, "--pause", "2:8", "--pause", "3:0", *engine_args)
        self.addCleanup(lambda: e.proc.poll() is None and e.proc.kill())
        parts = {"before": e.until("paused 2:8")}
        with vram.Client(self.daemon.sock, name="another engine") as tenant:
            # The registration maps the initial window, which was never
            # lent; the reserve of the whole window recalls the pool loans
            # lying in it: the engine, paused but dispatching, answers them.
            self.assertEqual(tenant.stage_register(2).kv_mapped_bytes, 4 << 20)
            r = tenant.kv_reserve(2, 10000, 100)
            self.assertEqual(r.kv_mapped_bytes, 20 << 20)
            e.go()
            parts["with tenant"] = e.until("paused 3:0")
        e.go()  # the tenant has left: its window may be lent again
        parts["after"] = e.finish()
        logs = os.environ.get("VRAM_MOE_LOG")
        if logs:  # the GPU suite keeps the transcripts
            with open(os.path.join(logs, f"{self._testMethodName}.log"), "w") as f:
                f.write("".join(e.out))
        return parts

    def check(self, parts: Dict[str, str]) -> None:
        everything = "".join(parts.values())
        self.assertEqual(tokens_of(everything), reference, everything)
        self.assertIn("request 4: 9000+8 tokens: refused: stage 0: 9008 tokens exceed "
                      "the native context of 8192", everything)
        for s in (0, 1):
            # Request 2's reserve took 4 of each stage's own loan chunks into KV.
            self.assertIn(f"  stage {s}: expert shrink: expert slots [24, 32) leave, "
                          "24 experts resident", parts["before"], everything)
            self.assertIn(f"  stage {s}: kv 16 MiB mapped, 24 expert slots backed",
                          parts["before"], everything)
            # The second process's arrival recalled the pool loans mid-decode
            # (the own loans were in KV by then: the trim gives those back).
            with_tenant = parts["with tenant"]
            self.assertRegex(with_tenant, rf"  stage {s}: recall: expert slots ")
            m = re.search(rf"^  stage {s}: trimmed: (\d+) expert slots backed, (\d+) experts "
                          r"resident; experts used (\d+) times resident, (\d+) from host copies",
                          with_tenant, re.M)
            self.assertIsNotNone(m, with_tenant)
            self.assertEqual((m.group(1), m.group(2)), ("24", "24"), with_tenant)
            self.assertGreater(int(m.group(4)), 0, "request 2 never used a host copy")
            # After it left, the first trim borrows them again and reloads.
            self.assertRegex(parts["after"], rf"  stage {s}: trimmed: 32 expert slots backed, "
                             "32 experts resident")
        self.assertIn("engine: done", parts["after"])

    def test_one_engine_two_stages(self) -> None:
        parts = self.run_with_tenant()
        self.check(parts)
        for s in (0, 1):  # a fresh vramd: this start wrote the weights
            self.assertIn(f"  stage {s}: weights: wrote set 'moe-engine/stage{s}', "
                          f"loaded {SET_BYTES} bytes, sealed", parts["before"])

    def test_the_second_start_maps_the_weights(self) -> None:
        """Two engine processes one after the other against one vramd: the
        first writes its weight sets and seals them, the second (the same
        split in two processes) maps them, loads 0 bytes, and decodes the
        same tokens as the first and as the reference."""
        runs = []
        for args in ((), ("--pipeline",)):
            e = Engine(self.daemon.sock, *args)
            self.addCleanup(lambda e=e: e.proc.poll() is None and e.proc.kill())
            runs.append(e.finish())
        first, second = runs
        for s in (0, 1):
            self.assertIn(f"  stage {s}: weights: wrote set 'moe-engine/stage{s}', "
                          f"loaded {SET_BYTES} bytes, sealed", first, first)
            self.assertIn(f"  stage {s}: weights: mapped set 'moe-engine/stage{s}' "
                          f"({SET_BYTES} bytes, sealed), loaded 0 bytes", second, second)
            self.assertNotIn("wrote set", second)
        self.assertEqual(tokens_of(first), reference, first)
        self.assertEqual(tokens_of(second), tokens_of(first), second)
        with vram.Client(self.daemon.sock, name="weights check", ctl=True) as ctl:
            st = ctl.status()
        self.assertEqual(st["counters"]["weights_hits"], 2)
        # Both sets stay cached for a third start: 4 MiB each.
        self.assertEqual(st["devices"][0]["weights_cached_bytes"], 8 << 20)

    def test_two_engine_processes(self) -> None:
        self.check(self.run_with_tenant("--pipeline"))
        self.assertRegex(self.daemon.log_text(), r"moe-engine stages 1, pid \d+\): disconnected")

    def test_bad_calls_raise(self) -> None:
        with vram.Client(self.daemon.sock, name="bad calls") as c:
            with self.assertRaises(vram.VramError) as cm:
                c.stage_register(9)
            self.assertEqual(cm.exception.errno, errno.ENOENT)
            info = c.stage_register(0)
            with self.assertRaises(vram.VramError) as cm:
                c.kv_reserve(0, 9000, 8)
            self.assertEqual(cm.exception.errno, errno.E2BIG)
            self.assertIn("native context of 8192", cm.exception.message)
            with self.assertRaises(vram.VramError) as cm:
                c.expert_slot_tensor(0, 0)  # no loans asked for: not backed
            self.assertEqual(cm.exception.errno, errno.EFAULT)
            with self.assertRaises(vram.VramError) as cm:
                c.lane_tensor(info.kv_region, 0, first_slot=1)  # past the initial window
            self.assertEqual(cm.exception.errno, errno.EFAULT)
            with self.assertRaises(vram.VramError) as cm:
                c.expert_claim(0, 3, [0])  # layer 3 is stage 1's
            self.assertEqual(cm.exception.errno, errno.EPERM)
            with vram.Client(self.daemon.sock, name="second") as d:
                with self.assertRaises(vram.VramError) as cm:
                    d.stage_register(0)
                self.assertEqual(cm.exception.errno, errno.EEXIST)


if __name__ == "__main__":
    unittest.main()
