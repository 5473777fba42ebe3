# SPDX-License-Identifier: Apache-2.0
"""vramd for the Python tests: the real daemon on a socket in a fresh
private directory (``from vramd_helpers import REPO, Daemon``).

Importing this module puts the tree's python/ first on sys.path and sets
$VRAM_LIB (default build/libvram.so) unless it is set, so import it before
``vram``.  vramd is $VRAMD_BIN (default build/vramd), its backend
$VRAM_TEST_BACKEND (host by default, as for the C suite); it runs with
VRAMD_CHECK_INVARIANTS=1 at log level debug.  $VRAM_TEST_KEEP=1 keeps
the daemon's directory (its log) instead of removing it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
os.environ["VRAM_LIB"] = os.environ.get("VRAM_LIB") or str(REPO / "build" / "libvram.so")

import vram  # noqa: E402

__all__ = ["REPO", "BACKEND", "Daemon", "end_holders"]

BACKEND = os.environ.get("VRAM_TEST_BACKEND") or "host"


def end_holders(directory: str) -> None:
    """Ends the vramd-holder of the vramd whose socket is in directory, if
    one still runs: it keeps weight sets across vramd's restarts, so it
    outlives a stopped vramd by design, and a test must not leave it."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"vramd-holder") and \
                any(directory.encode() in a for a in argv[1:]):
            try:
                os.kill(int(pid), signal.SIGTERM)
            except OSError:
                pass


class Daemon:
    """vramd with a configuration given as JSON text (config) or as a file
    (config_file), on a socket in a private temporary directory named
    prefix...; start() returns once a connection is served."""

    def __init__(self, config: Optional[str] = None, *,
                 config_file: Optional[str] = None, prefix: str = "vramd-py-",
                 name: str = "py-harness") -> None:
        if (config is None) == (config_file is None):
            raise ValueError("Daemon: give config or config_file")
        self.config_text = config
        self.name = name
        self.bin = os.environ.get("VRAMD_BIN") or str(REPO / "build" / "vramd")
        self.backend = os.environ.get("VRAM_TEST_BACKEND") or "host"
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "vramd.sock")
        self.config = config_file or os.path.join(self.dir, "vramd.json")
        self.log = os.path.join(self.dir, "vramd.log")
        self.proc: Optional[subprocess.Popen] = None

    def log_text(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def start(self) -> None:
        if not os.access(self.bin, os.X_OK):
            raise RuntimeError(f"no vramd at {self.bin}: build it first "
                               "(cmake --build build -j2) or set VRAMD_BIN")
        if self.config_text is not None:
            with open(self.config, "w", encoding="utf-8") as f:
                f.write(self.config_text)
        env = dict(os.environ, VRAMD_CHECK_INVARIANTS="1")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [self.bin, "--config", self.config, "--socket", self.sock,
                 "--backend", self.backend, "--log-level", "debug"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env)
        # Ready when a connection is served: the socket's path exists from
        # its bind, a moment before vramd listens (a connect between is
        # refused, as with no vramd).
        deadline = time.monotonic() + 10
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vramd exited with {self.proc.returncode} "
                                   f"during start; its log:\n{self.log_text()}")
            if os.path.exists(self.sock):
                try:
                    vram.Client(self.sock, name=self.name, ctl=True).close()
                    return
                except vram.VramError as e:
                    last = e
            time.sleep(0.02)
        self.stop(check=False)
        raise RuntimeError(f"vramd did not listen on {self.sock} within 10 s "
                           f"({last}); its log:\n{self.log_text()}")

    def stop(self, check: bool = True, keep: bool = False) -> None:
        """SIGTERM, wait (10 s), end its holder, remove the directory (kept
        with keep, for a failed test's log); with check, vramd must have
        exited with 0 and removed its socket."""
        problems: List[str] = []
        try:
            if self.proc and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    problems.append("vramd did not stop within 10 s of SIGTERM")
            if self.proc and self.proc.returncode != 0:
                problems.append(f"vramd exited with {self.proc.returncode}")
            if os.path.exists(self.sock):
                problems.append(f"socket {self.sock} left behind")
            if problems:
                problems.append("its log ends:\n" + self.log_text()[-8000:])
        finally:
            end_holders(self.dir)
            if keep or os.environ.get("VRAM_TEST_KEEP"):
                print(f"\nvramd's directory kept: {self.dir}", file=sys.stderr)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
        if check and problems:
            raise AssertionError("; ".join(problems))
