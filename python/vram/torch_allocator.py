# SPDX-License-Identifier: Apache-2.0
"""PyTorch's CUDA allocator over vramd: ``libvram_torch_alloc.so`` as a
``torch.cuda.memory.CUDAPluggableAllocator``, for a ``torch.cuda.MemPool``
whose tensors live in a vramd region at a fixed address (docs/python.md, "At a
glance", and the tags that sleep and wake).

Importing this module imports torch and checks its version: the pool needs
``torch.cuda.MemPool`` over a pluggable allocator, which PyTorch has from
2.6 on (Debian 12's python3-torch is 1.13).  An older torch is an
``ImportError`` that says which one was found and what is needed, rather
than an ``AttributeError`` deep in an engine's start.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

__all__ = ["MIN_TORCH", "library_path", "allocator", "mempool"]

#: The oldest PyTorch the allocator is used with: torch.cuda.MemPool with a
#: CUDAPluggableAllocator's allocator.
MIN_TORCH: Tuple[int, int] = (2, 6)

#: The allocator library's file name.
LIBRARY = "libvram_torch_alloc.so"


def _version(text: str) -> Tuple[int, ...]:
    """``"2.11.0+cu130"`` -> ``(2, 11, 0)``; what does not parse counts 0."""
    out: List[int] = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _check_torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError(
            "vram.torch_allocator needs PyTorch %d.%d or later, and none is "
            "installed (%s)" % (MIN_TORCH + (e,))) from e
    have = _version(getattr(torch, "__version__", "0"))
    if have[:2] < MIN_TORCH or not hasattr(torch.cuda, "MemPool"):
        raise ImportError(
            "vram.torch_allocator needs PyTorch %d.%d or later "
            "(torch.cuda.MemPool over a pluggable allocator); this is %s"
            % (MIN_TORCH + (torch.__version__,)))
    return torch


torch = _check_torch()


def _recorded() -> Optional[str]:
    try:
        from . import _install  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_install, "TORCH_ALLOC", None)


def library_path() -> str:
    """Where ``libvram_torch_alloc.so`` is: ``$VRAM_TORCH_ALLOC``, a copy
    beside this package, or the path recorded at install
    (``cmake --install``, the python3-vram package).  ``FileNotFoundError``
    lists what was tried."""
    env = os.environ.get("VRAM_TORCH_ALLOC")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"VRAM_TORCH_ALLOC={env}: no such file")
        return env
    tried = []
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)
    rec = _recorded()
    for p in [beside] + ([rec] if rec else []):
        if os.path.exists(p):
            return p
        tried.append(p)
    raise FileNotFoundError(
        f"no {LIBRARY}: tried " + ", ".join(tried)
        + " (set VRAM_TORCH_ALLOC to its path; the build makes it beside libvram)")


def allocator() -> Any:
    """A ``CUDAPluggableAllocator`` over vramd (its client connects at the
    first allocation, to ``$VRAM_SOCKET``; ``$VRAM_TORCH_REGION`` sizes its
    region)."""
    return torch.cuda.memory.CUDAPluggableAllocator(
        library_path(), "vram_torch_malloc", "vram_torch_free")


def mempool() -> Any:
    """A ``torch.cuda.MemPool`` whose blocks come from vramd: allocate under
    ``with torch.cuda.use_mem_pool(pool):``."""
    return torch.cuda.MemPool(allocator().allocator())
