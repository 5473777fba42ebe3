# SPDX-License-Identifier: Apache-2.0
"""Integrations of vramd with inference frameworks, over :mod:`vram`.

Importing this package imports nothing heavy; each part is a module of its
own, imported when used:

- :mod:`vram.integrations.kv` (PyTorch): a vramd stage's KV region as per
  layer K and V tensors, laid out token-major so that the mapped part of
  every lane holds whole tokens; it reserves before a write passes the
  mapped window and trims after a request.
- :mod:`vram.integrations.experts` (PyTorch): expert residency over a
  stage's expert loans -- host copies of every expert, the most used ones
  in vramd's expert slots, RECALL and EXPERT_SHRINK handled, misses
  computed from the host copies and counted -- and the two ways of
  computing a mixture-of-experts layer from either: the per-expert loop
  (transformers' eager numbers) and the grouped path, one grouped multiply
  over the slot table (transformers' grouped_mm numbers).
- :mod:`vram.integrations.transformers` (transformers 5.x):
  :class:`~vram.integrations.transformers.VramCache`, a transformers
  ``Cache`` over the first two, and
  :func:`~vram.integrations.transformers.install`, which swaps a
  Qwen3-MoE model's experts modules for ones over vramd's expert slots.

The first two need no transformers: they are what
``tests/python/test_transformers_cache.py`` tests against the real vramd.
``docs/engines.md`` ("transformers") says how to use them and what they do
not do.
"""

__all__ = ["experts", "kv", "transformers"]
