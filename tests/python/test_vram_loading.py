# SPDX-License-Identifier: Apache-2.0
"""Where the package finds libvram (vram/_lib.py: $VRAM_LIBRARY, beside
itself, the path recorded at install, the loader), what it says when it
finds none, and the torch allocator module's version check. Each case runs
in a fresh interpreter over a copy of the package, with an environment that
names nothing unless the case says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILT = os.environ.get("VRAM_LIB") or str(REPO / "build" / "libvram.so")

PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import vram
from vram import _lib
assert vram.__file__.startswith(sys.argv[1]), vram.__file__
try:
    _lib.load()
except OSError as e:
    print("ERROR", e)
else:
    print("LOADED", _lib.library_path())
"""


class TestLoading(unittest.TestCase):
    def setUp(self) -> None:
        if not os.path.exists(BUILT):
            self.skipTest(f"no libvram at {BUILT}")
        self.tmp = tempfile.mkdtemp(prefix="vram-loading-")
        self.addCleanup(shutil.rmtree, self.tmp)
        shutil.copytree(REPO / "python" / "vram", Path(self.tmp) / "vram",
                        ignore=shutil.ignore_patterns("__pycache__", "_install.py"))

    def probe(self, **env: str) -> str:
        clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
        clean.update(env)
        r = subprocess.run([sys.executable, "-c", PROBE, self.tmp], env=clean,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_named_by_vram_library(self) -> None:
        self.assertEqual(self.probe(VRAM_LIBRARY=BUILT), "LOADED " + BUILT)

    def test_the_older_name_still_works(self) -> None:
        self.assertEqual(self.probe(VRAM_LIB=BUILT), "LOADED " + BUILT)

    def test_a_named_library_that_is_not_there(self) -> None:
        """Asked for by name, nothing else stands in, and the error says
        what was tried and how to name another."""
        missing = os.path.join(self.tmp, "nowhere", "libvram.so.0")
        out = self.probe(VRAM_LIBRARY=missing)
        self.assertTrue(out.startswith("ERROR cannot load libvram: tried " + missing), out)
        self.assertIn("VRAM_LIBRARY", out)

    def test_beside_the_package(self) -> None:
        """A wheel that carries libvram in the package's folder."""
        shutil.copy(BUILT, Path(self.tmp) / "vram" / "libvram.so.0")
        self.assertEqual(self.probe(),
                         "LOADED " + str(Path(self.tmp) / "vram" / "libvram.so.0"))

    def test_the_path_recorded_at_install(self) -> None:
        """cmake --install and the Debian package write vram/_install.py:
        an install to /usr/local needs no ldconfig."""
        lib = os.path.join(self.tmp, "prefix", "lib", "libvram.so.0")
        os.makedirs(os.path.dirname(lib))
        shutil.copy(BUILT, lib)
        (Path(self.tmp) / "vram" / "_install.py").write_text(
            f"LIBVRAM = {lib!r}\nTORCH_ALLOC = None\n")
        self.assertEqual(self.probe(), "LOADED " + lib)

    def test_none_anywhere(self) -> None:
        """Nothing beside, nothing recorded: the loader's turn; where it
        has none either (no libvram installed on this machine), the error
        lists every place tried."""
        out = self.probe()
        if out.startswith("LOADED"):
            self.skipTest("this machine's loader finds a libvram: " + out)
        self.assertIn("cannot load libvram: tried", out)
        self.assertIn("libvram.so.0", out)
        self.assertIn("VRAM_LIBRARY", out)


class TestTorchAllocatorModule(unittest.TestCase):
    def test_version_checked_at_import(self) -> None:
        """An older torch (Debian 12's 1.13), or none, is an ImportError
        naming the version needed and the one found."""
        code = ("import sys; sys.path.insert(0, %r)\n"
                "try:\n"
                "    import torch; v = torch.__version__\n"
                "except ImportError:\n"
                "    v = None\n"
                "try:\n"
                "    import vram.torch_allocator as t\n"
                "except ImportError as e:\n"
                "    print('REFUSED', v, '|', e)\n"
                "else:\n"
                "    print('IMPORTED', v, t.MIN_TORCH)\n") % str(REPO / "python")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.strip()
        found = out.split()[1]
        if out.startswith("IMPORTED"):
            major, minor = (int(x) for x in found.split("+")[0].split(".")[:2])
            self.assertGreaterEqual((major, minor), (2, 6), out)
            return
        self.assertIn("needs PyTorch 2.6 or later", out)
        if found != "None":
            self.assertIn("this is " + found, out)
        else:
            self.assertIn("none is installed", out)


if __name__ == "__main__":
    unittest.main()
