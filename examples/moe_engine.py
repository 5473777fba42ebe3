#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small mixture-of-experts decoder on vramd, in PyTorch, written to be read.

The model: 4 decoder layers (attention, then 16 experts of which the router
picks 2 per token), split into two pipeline stages of examples/moe_engine.json:
stage 0 runs layers 0-1, stage 1 layers 2-3. Each stage keeps
  - its attention and router weights in a weight set of vramd's
    ("moe-engine/stage0", "moe-engine/stage1"): the first engine to start
    loads them into it and seals it; every engine after it, in another
    process, even after the first one exited, maps them read-only and loads
    nothing,
  - its K and V in the stage's KV region (one lane per layer and K or V),
  - as many of its 32 experts as have backed slots in the expert region,
    and computes the others from their host copies.
The daemon moves memory under it: a long prompt's kv_reserve takes expert
slots back into KV (EXPERT_SHRINK), another engine registering a stage on
the same device recalls loans (RECALL), a trim gives KV back to experts. The
engine evicts on those events and reloads after each request. None of it
changes a token: the same model in ordinary memory (--plain) decodes the
same tokens, which is what tests/python/test_moe_engine.py checks.

  moe_engine.py --plain               the model in ordinary memory
  moe_engine.py --socket S            one engine process with both stages
  moe_engine.py --socket S --pipeline two engine processes, one stage each
  --device cpu|cuda  where tensors live (default: cuda for vramd's cuda
                     backend, else cpu); --pause R:S  see pause() below.
"""
import argparse
import errno
import json
import math
import multiprocessing as mp
import os
import select
import sys

import torch

try:
    import vram
except ImportError:  # run from a clone: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import vram

D, HEADS, FFN, VOCAB = 256, 4, 512, 512          # float32 throughout
EXPERTS, TOPK = 16, 2                            # per layer
STAGES = [(0, 0, 1), (1, 2, 3)]                  # (stage, first, last layer)
REQUESTS = [(600, 24), (2500, 24), (300, 24), (9000, 8), (100, 16)]
MIB = 1 << 20
# The reference keeps the same context as vramd's stages.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_engine.json")) as f:
    CONTEXT = json.load(f)["stages"][0]["native_context"]


# ---- the model ----------------------------------------------------------------

# The weights a stage keeps on its device, per layer, in this order: what
# its weight set holds (float32).
DENSE = [("attn", (4, D, D)), ("router", (D, EXPERTS))]
DENSE_BYTES = sum(4 * math.prod(shape) for _, shape in DENSE)   # per layer


def dense_weights(layer):
    """Layer `layer`'s attention and router weights, the same in every
    process (seeded per layer): what an engine would read from disk."""
    g = torch.Generator().manual_seed(1000 + layer)
    return {name: torch.randn(*shape, generator=g) / math.sqrt(D) for name, shape in DENSE}


def expert_weights(layer):
    """Layer `layer`'s experts, (EXPERTS, D*FFN + FFN*D): W1 then W2, one
    slot each; their host copies."""
    g = torch.Generator().manual_seed(2000 + layer)
    r = lambda *shape, fan: torch.randn(*shape, generator=g) / math.sqrt(fan)
    return torch.cat([r(EXPERTS, D * FFN, fan=D), r(EXPERTS, FFN * D, fan=FFN)], dim=1)


def layer_weights(layer):
    return {**dense_weights(layer), "experts": expert_weights(layer)}


def embeddings():
    g = torch.Generator().manual_seed(7)
    return torch.randn(VOCAB, D, generator=g), torch.randn(D, VOCAB, generator=g) / math.sqrt(D)


def prompt(r, n):
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(50 + r))


def rmsnorm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def attention(x, w, K, V, pos):
    """Causal attention of tokens at positions [pos, pos + n); their K and V
    are written into K and V first."""
    n, hd = x.shape[0], D // HEADS
    q, K[pos:pos + n], V[pos:pos + n] = x @ w[0], x @ w[1], x @ w[2]
    t = pos + n
    q = q.view(n, HEADS, hd).transpose(0, 1)
    k = K[:t].view(t, HEADS, hd).transpose(0, 1)
    v = V[:t].view(t, HEADS, hd).transpose(0, 1)
    s = q @ k.transpose(1, 2) / math.sqrt(hd)
    future = torch.arange(t, device=x.device) > torch.arange(pos, t, device=x.device)[:, None]
    o = torch.softmax(s.masked_fill(future, float("-inf")), -1) @ v
    return o.transpose(0, 1).reshape(n, D) @ w[3]


def moe(x, router, expert):
    """Top-2 routing; expert(e) gives expert e's flat weights."""
    wt, idx = torch.topk(x @ router, TOPK, dim=-1)
    wt = torch.softmax(wt, -1)
    out = torch.zeros_like(x)
    for e in idx.unique().tolist():
        rows, which = (idx == e).nonzero(as_tuple=True)
        flat = expert(e)
        w1, w2 = flat[:D * FFN].view(D, FFN), flat[D * FFN:].view(FFN, D)
        out.index_add_(0, rows, (torch.relu(x[rows] @ w1) @ w2) * wt[rows, which, None])
    return out


class StageCompute:
    """Runs a stage's layers over its memory: subclasses say where it is."""

    def run(self, h, pos):
        for i in range(self.nlayers):
            K, V = self.kv(i)
            h = h + attention(rmsnorm(h), self.attn(i), K, V, pos)
            h = h + moe(rmsnorm(h), self.router(i), lambda e: self.expert(i, e))
        return h


class PlainStage(StageCompute):
    """The reference: everything in ordinary torch memory."""

    def __init__(self, first, last, device):
        self.nlayers, self.device = last - first + 1, device
        self.w = [{k: v.to(device) for k, v in layer_weights(l).items()}
                  for l in range(first, last + 1)]
        self.cache = [(torch.zeros(CONTEXT, D, device=device),
                       torch.zeros(CONTEXT, D, device=device)) for _ in self.w]

    def begin(self, n, new):
        if n + new > CONTEXT:
            raise vram.VramError(errno.E2BIG, f"over the native context ({CONTEXT} tokens)")

    def end(self):
        pass

    kv = lambda self, i: self.cache[i]
    attn = lambda self, i: self.w[i]["attn"]
    router = lambda self, i: self.w[i]["router"]
    expert = lambda self, i, e: self.w[i]["experts"][e]


# ---- a stage in vramd's memory -------------------------------------------------

class VramStage(StageCompute):
    """A stage of vramd's configuration: weights in a weight set, KV in its
    lanes, experts in backed slots, the rest from host copies. Made in two
    steps: the weights and the registration (__init__), then the expert
    loans (reload): an engine's every stage has its weights before any asks
    for loans, which take what memory is left."""

    def __init__(self, client, stage, first, last, device):
        self.c, self.stage, self.device = client, stage, device
        self.first, self.nlayers = first, last - first + 1
        self.host = [expert_weights(l) for l in range(first, last + 1)]
        self.uses = [0, 0]           # expert computations: resident, host copy
        self.open_weights()
        self.setup()

    def open_weights(self):
        """The stage's attention and router weights, in weight set
        moe-engine/stageN: written and sealed by the first engine that
        opens it, mapped read-only by every one after it (whose tensors
        are the set's memory: on cuda at the set's device address)."""
        layers = range(self.first, self.first + self.nlayers)
        name, nbytes = f"moe-engine/stage{self.stage}", DENSE_BYTES * self.nlayers
        key = vram.weights_key("examples/moe_engine.py (seeds 1000 + layer)", "float32",
                               DENSE, {"layers": [layers[0], layers[-1]]})
        self.weights = self.c.weights_open(name, 0, nbytes, key)
        loaded = 0
        if self.weights.writer:      # nobody had it: load it, then seal it
            for l, t in zip(layers, self.tensors()):
                for k, v in dense_weights(l).items():
                    t[k].copy_(v)
                    loaded += v.numel() * v.element_size()
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()  # the copies are done before the seal
            self.weights.seal()      # read-only from now on, for everyone
            print(f"  stage {self.stage}: weights: wrote set '{name}', loaded {loaded} "
                  "bytes, sealed", flush=True)
        else:
            print(f"  stage {self.stage}: weights: mapped set '{name}' ({nbytes} bytes, "
                  f"sealed), loaded {loaded} bytes", flush=True)
        self.w = self.tensors()      # views made after the seal: read-only

    def tensors(self):
        """Per layer, its dense weights as tensors over the set."""
        out, off = [], 0
        for _ in range(self.nlayers):
            views = {}
            for k, shape in DENSE:
                views[k] = self.weights.tensor(torch.float32, shape, off)
                off += 4 * math.prod(shape)
            out.append(views)
        return out

    def setup(self):
        info = self.c.stage_register(self.stage)
        self.slot_bytes, self.kv_region = info.expert_slot_bytes, info.kv_region
        assert self.slot_bytes == 2 * D * FFN * 4, "moe_engine.json's expert_slot"
        self.slot_of = {}            # (layer index, expert) -> slot
        self.in_slot = {}            # slot -> (layer index, expert)
        self.view = {}               # slot -> its tensor, while backed
        self.backed, self.lost = 0, False

    def reload(self):
        """Asks for loans (as many slots as there are experts) and loads the
        experts that are not resident into free backed slots, claiming them."""
        missing = self.nlayers * EXPERTS - self.c.expert_residency(self.stage).expert_slots_backed
        if missing > 0:
            self.c.expert_request(self.stage, missing * self.slot_bytes)
        self.backed = self.c.expert_residency(self.stage).expert_slots_backed
        free = (s for s in range(self.backed) if s not in self.in_slot)
        for key in ((i, e) for i in range(self.nlayers) for e in range(EXPERTS)):
            if key in self.slot_of:
                continue
            slot = next(free, None)
            if slot is None:
                break
            t = self.c.expert_slot_tensor(self.stage, slot, dtype=torch.float32)
            t.copy_(self.host[key[0]][key[1]])
            self.slot_of[key], self.in_slot[slot], self.view[slot] = slot, key, t
        for i in range(self.nlayers):
            slots = [s for (j, _), s in self.slot_of.items() if j == i]
            if slots:
                self.c.expert_claim(self.stage, self.first + i, slots)

    def evict(self, first, end):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()  # no kernel may still read them
        for slot in range(first, end):
            key = self.in_slot.pop(slot, None)
            if key is not None:
                del self.slot_of[key], self.view[slot]

    def on_event(self, ev):
        T = vram.EventType
        if ev.type in (T.RECALL, T.EXPERT_SHRINK):
            self.evict(ev.slot_first, ev.slot_end)
            self.backed = ev.expert_slots_backed
            name = "recall" if ev.type == T.RECALL else "expert shrink"
            print(f"  stage {self.stage}: {name}: expert slots [{ev.slot_first}, "
                  f"{ev.slot_end}) leave, {self.resident()} experts resident", flush=True)
        elif ev.type == T.BUDGET_CHANGED:
            self.evict(ev.expert_slots_backed, max(self.in_slot, default=-1) + 1)
            self.backed = ev.expert_slots_backed  # loaded after the call
        elif ev.type == T.STAGE_LOST:
            self.evict(0, max(self.in_slot, default=-1) + 1)
            self.lost = True

    def resident(self):
        return len(self.slot_of)

    def begin(self, n, new):
        """Before decode: KV for the prompt and every output token, so that
        decode never allocates. Raises VramError E2BIG past the context."""
        if self.lost:
            self.setup()
            self.reload()
        r = self.c.kv_reserve(self.stage, n, new)
        # The lanes' mapped prefix, as (tokens, D): the base never moves, only
        # the length, so views are made again after each reserve.
        self.cache = [self.c.lane_tensor(self.kv_region, lane, dtype=torch.float32).view(-1, D)
                      for lane in range(2 * self.nlayers)]
        print(f"  stage {self.stage}: kv {r.kv_mapped_bytes / MIB:g} MiB mapped, "
              f"{r.expert_slots_backed} expert slots backed, {self.resident()} experts resident",
              flush=True)

    def end(self):
        """After the request: KV back to the initial window, experts back."""
        self.cache = None
        self.c.kv_trim(self.stage)
        self.reload()
        print(f"  stage {self.stage}: trimmed: {self.backed} expert slots backed, "
              f"{self.resident()} experts resident; experts used {self.uses[0]} times "
              f"resident, {self.uses[1]} from host copies", flush=True)
        self.uses = [0, 0]

    kv = lambda self, i: (self.cache[2 * i], self.cache[2 * i + 1])
    attn = lambda self, i: self.w[i]["attn"]
    router = lambda self, i: self.w[i]["router"]

    def expert(self, i, e):
        slot = self.slot_of.get((i, e))
        self.uses[slot is None] += 1
        if slot is not None:
            return self.view[slot]
        return self.host[i][e].to(self.device)


def connect(socket, stages, device):
    """A client holding `stages`, their weights mapped and no loans asked
    for yet (reload); events go to the stage they name."""
    c = vram.Client(socket, name=f"moe-engine stages {','.join(str(s[0]) for s in stages)}")
    device = device or ("cuda" if c.backend == "cuda" else "cpu")
    by_id = {}
    c.on_event = lambda ev: by_id[ev.stage].on_event(ev) if ev.stage in by_id else None
    for s, first, last in stages:
        by_id[s] = VramStage(c, s, first, last, device)
    return c, [by_id[s[0]] for s in stages]


def wait_readable(fd, clients):
    """Blocks until fd is readable, answering the clients' events meanwhile:
    the library reads its connection only inside calls, so an engine that
    waits must dispatch, or recalls miss their deadline."""
    fds = [c.fileno() for c in clients] + ([fd] if fd is not None else [])
    while True:
        ready, _, _ = select.select(fds, [], [], None if fd is not None else 0)
        for c in clients:
            if c.fileno() in ready:
                c.dispatch()
        if fd is None or fd in ready:
            return


# ---- two engine processes: stage 1 in a worker -----------------------------------

class RemoteStage:
    """Stage 1 in another process, over a pipe; while it waits for an answer
    this process keeps answering its own client's events."""

    def __init__(self, socket, device, clients):
        self.pipe, child = mp.Pipe()
        self.proc = mp.get_context("spawn").Process(target=worker, args=(child, socket, device))
        self.proc.start()
        self.clients = clients
        self.call("ready")

    def call(self, *msg):
        self.pipe.send(msg)
        wait_readable(self.pipe.fileno(), self.clients)
        kind, value = self.pipe.recv()
        if kind == "error":
            raise vram.VramError(*value)
        return value

    def reload(self):
        self.call("load")

    def begin(self, n, new):
        self.call("begin", n, new)

    def run(self, h, pos):
        return torch.from_numpy(self.call("run", h.cpu().numpy(), pos)).to(h.device)

    def end(self):
        self.call("end")

    def close(self):
        self.pipe.send(("quit",))
        self.proc.join()


def worker(pipe, socket, device):
    c, (stage,) = connect(socket, STAGES[1:], device)
    with c:
        while True:
            wait_readable(pipe.fileno(), [c])
            kind, *args = pipe.recv()
            if kind == "quit":
                return
            try:
                if kind == "run":
                    h = torch.from_numpy(args[0]).to(stage.device)
                    pipe.send(("ok", stage.run(h, args[1]).cpu().numpy()))
                    continue
                if kind == "load":
                    stage.reload()
                elif kind == "begin":
                    stage.begin(*args)
                elif kind == "end":
                    stage.end()
                pipe.send(("ok", None))
            except vram.VramError as e:
                pipe.send(("error", (e.errno, e.message)))


# ---- serving ------------------------------------------------------------------

def pause(where, pauses, clients):
    """A test hook: at request R step S (0: before its reserve) named by
    --pause R:S, say so and wait for a line on stdin, answering events."""
    if where in pauses:
        print(f"paused {where[0]}:{where[1]}", flush=True)
        wait_readable(sys.stdin.fileno(), clients)
        sys.stdin.readline()


def generate(stages, embed, unembed, r, n, new, pauses, clients):
    pause((r, 0), pauses, clients)
    for i, s in enumerate(stages):
        try:
            s.begin(n, new)
        except vram.VramError as e:
            print(f"request {r}: {n}+{new} tokens: refused: {e.message}", flush=True)
            for begun in stages[:i]:
                begun.end()
            return None
    tokens, x, pos = [], prompt(r, n).to(embed.device), 0
    for step in range(new):
        if step:
            pause((r, step), pauses, clients)
            wait_readable(None, clients)  # events that came meanwhile
        h = embed[x]
        for s in stages:
            h = s.run(h, pos)
        pos += x.shape[0]
        x = torch.argmax(rmsnorm(h[-1:]) @ unembed, -1)
        tokens.append(int(x))
    for s in stages:
        s.end()
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", help="vramd's socket (default: $VRAM_SOCKET, else /run/vramd/vramd.sock)")
    ap.add_argument("--plain", action="store_true", help="the model in ordinary memory")
    ap.add_argument("--pipeline", action="store_true", help="stage 1 in a second process")
    ap.add_argument("--device", help="cpu or cuda")
    ap.add_argument("--pause", action="append", default=[], metavar="R:S")
    a = ap.parse_args()
    pauses = {tuple(int(v) for v in p.split(":")) for p in a.pause}

    clients, remote = [], None
    if a.plain:
        device = a.device or "cpu"
        stages = [PlainStage(f, l, device) for _, f, l in STAGES]
    else:
        c, stages = connect(a.socket, STAGES if not a.pipeline else STAGES[:1], a.device)
        clients, device = [c], stages[0].device
        print(f"connected as client {c.id} (backend {c.backend}), tensors on {device}", flush=True)
        if a.pipeline:
            remote = RemoteStage(a.socket, a.device, clients)
            stages.append(remote)
        for s in stages:             # every stage has its weights: now the loans
            s.reload()
    embed, unembed = (t.to(device) for t in embeddings())
    with torch.no_grad():
        for r, (n, new) in enumerate(REQUESTS, 1):
            tokens = generate(stages, embed, unembed, r, n, new, pauses, clients)
            if tokens is not None:
                print(f"tokens {r}: {' '.join(map(str, tokens))}", flush=True)
    if remote:
        remote.close()
    for c in clients:
        c.close()
    print("engine: done", flush=True)


if __name__ == "__main__":
    main()
