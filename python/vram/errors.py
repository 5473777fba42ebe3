# SPDX-License-Identifier: Apache-2.0
"""The exception of the vram package."""

from __future__ import annotations

import os
from typing import Optional

from ._args import checked_function, i32

__all__ = ["VramError", "strerror"]


@checked_function
def strerror(err: i32) -> str:
    """vramd's meaning of an error code, negative or not (vram_strerror).

    Falls back to the C library's text when libvram cannot be loaded.
    """
    try:
        from . import _lib

        text = _lib.load().vram_strerror(-abs(err))
    except OSError:
        return os.strerror(abs(int(err)))
    return text.decode("utf-8", "replace") if text else os.strerror(abs(int(err)))


class VramError(OSError):
    """A libvram call failed.

    ``errno`` is the positive errno (the C call returned its negation);
    ``strerror`` is vramd's meaning of it (``vram_strerror``: for E2BIG
    "over a limit (a count, or the stage's native context)", not the C
    library's "Argument list too long"); ``message`` is the daemon's own
    words for the failure (``vram_client_last_error``, or the
    ``vram_client_connect`` error buffer), or ``strerror`` when it said
    nothing; ``call`` is the C function that failed, when known.

    ``str(e)`` reads ``[Errno N] call: strerror: message``.  It subclasses
    ``OSError``, so ``except OSError`` catches it too (but it is never
    remapped to ``FileNotFoundError`` and the like: test ``e.errno``).
    """

    message: str
    call: Optional[str]

    def __init__(self, errno: int, message: str = "", *,
                 call: Optional[str] = None,
                 strerror_text: Optional[str] = None) -> None:
        """Builds the error of a failed call.

        errno may be given negative, as libvram returns it.
        """
        code = abs(int(errno))
        if strerror_text is not None:
            text = strerror_text
        else:
            text = strerror(code) if code < 2**31 else f"unknown error {code}"
        super().__init__(code, text)
        self.message = message or text
        self.call = call

    def __str__(self) -> str:
        s = f"[Errno {self.errno}] "
        if self.call:
            s += f"{self.call}: "
        s += str(self.strerror)
        if self.message and self.message != self.strerror:
            s += f": {self.message}"
        return s

    def __reduce__(self):  # keeps message and call through pickle
        return (_rebuild, (self.errno, self.message, self.call, self.strerror))


def _rebuild(errno: int, message: str, call: Optional[str],
             text: Optional[str]) -> VramError:
    return VramError(errno, message, call=call, strerror_text=text)
