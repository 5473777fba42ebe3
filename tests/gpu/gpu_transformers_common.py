# SPDX-License-Identifier: Apache-2.0
"""What the transformers GPU scripts share (those beside this file and
tests/python/gpu_transformers_cache.py): the reason to skip (no torch, no
transformers, no CUDA device), a vramd of their own on a temporary socket,
PASS/FAIL lines, another engine that arrives, and a Qwen3-MoE with random
weights built on the GPU.

vramd is $VRAMD_BIN (else build/vramd), libvram $VRAM_LIB (else
build/libvram.so), as scripts/gpu.sh sets them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
os.environ["VRAM_LIB"] = os.environ.get("VRAM_LIB") or str(REPO / "build" / "libvram.so")

MIB = 1 << 20


def why_skip() -> Optional[str]:
    """None when torch with a CUDA device and transformers 5 are here, else
    the reason, in one line."""
    try:
        import torch
    except ImportError as e:
        return f"torch not installed ({e})"
    if not torch.cuda.is_available():
        return f"no CUDA device for torch {torch.__version__}"
    try:
        import transformers
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: F401
        from transformers.cache_utils import Cache, CacheLayerMixin  # noqa: F401
    except ImportError as e:
        return f"transformers 5 not installed ({e})"
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        return f"transformers {transformers.__version__}: VramCache needs 5.x"
    return None


def skip_if_needed(name: str) -> None:
    """Prints 'skipped: <reason>' and exits 0 where the script cannot run."""
    why = why_skip()
    if why is not None:
        print(f"{name}: skipped: {why}", flush=True)
        sys.exit(0)


class Daemon:
    """vramd (cuda backend) with a configuration of its own, on a temporary
    socket; its log is kept (and printed on failure) until stop()."""

    def __init__(self, config: Dict[str, Any], prefix: str = "vramd-gpu-tf-") -> None:
        import vram
        self.bin = os.environ.get("VRAMD_BIN") or str(REPO / "build" / "vramd")
        if not os.access(self.bin, os.X_OK):
            raise SystemExit(f"FAIL: no vramd at {self.bin} (set VRAMD_BIN)")
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "vramd.sock")
        self.log = os.path.join(self.dir, "vramd.log")
        path = os.path.join(self.dir, "vramd.json")
        with open(path, "w") as f:
            json.dump(config, f)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([self.bin, "--config", path, "--socket", self.sock,
                                          "--backend", "cuda", "--log-level", "info"],
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("FAIL: vramd did not start; its log:\n" + self.log_text())
            if os.path.exists(self.sock):
                try:
                    vram.Client(self.sock, name="gpu-tf harness", ctl=True).close()
                    return
                except vram.VramError:
                    pass
            time.sleep(0.05)

    def log_text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self, keep: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if keep:
            print(f"vramd's directory kept: {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Checks:
    """PASS/FAIL lines; ``failed`` the checks that failed."""

    def __init__(self) -> None:
        self.failed: List[str] = []

    def __call__(self, ok: bool, what: str) -> bool:
        print(f"{'PASS' if ok else 'FAIL'}: {what}", flush=True)
        if not ok:
            self.failed.append(what)
        return ok


def info(ok: bool, what: str) -> None:
    """A comparison reported, not checked."""
    print(f"INFO ({'same' if ok else 'differs'}): {what}", flush=True)


def arrive(sock: str, tenant: Dict[str, Any], stage: int, tokens: int) -> None:
    """Another engine on the GPU registers ``stage`` and reserves ``tokens``
    of its window, on a thread (its reserve waits for this process's recall
    answer); ``tenant`` gets its "client", "kv" and "thread", or "error"."""
    import vram

    def run() -> None:
        try:
            t = vram.Client(sock, name="another engine")
            tenant["client"] = t
            t.stage_register(stage)
            tenant["kv"] = t.kv_reserve(stage, tokens, 100)
        except BaseException as e:
            tenant["error"] = repr(e)

    tenant["thread"] = threading.Thread(target=run, daemon=True)
    tenant["thread"].start()


def set_experts_implementation(model: Any, name: str) -> None:
    """The stock experts modules' implementation (eager, batched_mm,
    grouped_mm); vram's VramExperts ignore it."""
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
    else:
        model.config._experts_implementation = name


def experts_implementation(model: Any) -> str:
    return str(getattr(model.config, "_experts_implementation", None) or "eager")


def set_attn_implementation(model: Any, name: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def build_qwen3_moe(*, layers: int, hidden: int, heads: int, kv_heads: int, experts: int,
                    topk: int, moe_inter: int, vocab: int, max_positions: int,
                    dtype: Any, attn: str, seed: int = 1234) -> Any:
    """A Qwen3-MoE with random weights (no hub), made on the GPU in its
    dtype (initialising experts on the CPU in float32 takes long), every
    layer attention then experts. Its head_dim is hidden // heads (the
    config has no head_dim of its own: vram's model_dims reads the same)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads,
                         moe_intermediate_size=moe_inter, num_experts=experts,
                         num_experts_per_tok=topk, norm_topk_prob=True,
                         max_position_embeddings=max_positions, decoder_sparse_step=1,
                         mlp_only_layers=[], tie_word_embeddings=False)
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = Qwen3MoeForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to(dtype).eval()
    set_attn_implementation(model, attn)
    return model


def processor_base() -> type:
    try:
        from transformers import LogitsProcessor
    except ImportError:  # pragma: no cover - older layout
        from transformers.generation.logits_process import LogitsProcessor
    return LogitsProcessor


if __name__ == "__main__":
    # scripts/gpu.sh asks first: exit 0 when the transformers scripts can
    # run, else 3 with the reason on one line.
    why = why_skip()
    print("ok" if why is None else f"skipped: {why}")
    sys.exit(0 if why is None else 3)
