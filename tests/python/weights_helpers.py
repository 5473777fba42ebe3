# SPDX-License-Identifier: Apache-2.0
"""Reading and writing a whole weight set through its views: the helpers of
tests/python/test_vram_weights.py and of the processes it starts (``from
weights_helpers import *``).  numpy is needed, and torch with CUDA on the
cuda backend (where sets are read and written through CUDA tensors)."""

import hashlib

__all__ = ["fill", "pattern", "read", "sha"]


def read(w):
    """The set's bytes, through a view."""
    if w.client.backend == "host":
        return w.array().tobytes()
    return w.tensor().cpu().numpy().tobytes()


def fill(w, data):
    """Writes data over the set (its writer, before the seal)."""
    import numpy as np
    if w.client.backend == "host":
        w.array()[:] = np.frombuffer(data, dtype=np.uint8)
        return
    import torch
    w.tensor().copy_(torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy()).cuda())
    torch.cuda.synchronize()


def pattern(n, seed):
    """n bytes that differ at every 4-byte word."""
    import numpy as np
    words = np.arange((n + 3) // 4, dtype=np.uint64) * 2654435761 + seed
    return (words & 0xFFFFFFFF).astype(np.uint32).tobytes()[:n]


def sha(b):
    """The SHA-256 of b, in hex."""
    return hashlib.sha256(b).hexdigest()
