#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The metrics endpoint serves its scraper while other peers hold as many
connections against it as they can: idle ones (connected, nothing sent),
slow ones (a head at 1 byte/s that never ends) and keep-alive ones (one
scrape, then idle), each reopened when the endpoint closes it. They come
from other loopback addresses than the scraper's (127.0.1.1, 127.0.1.2,
...: any 127.0.0.0/8 address is this host), CONNS // ADDRS of them per
address, so that both the per-address limit and the cap on all
connections are met. Meanwhile the scraper (127.0.0.1) scrapes SCRAPES
times, one scrape every half second, each on a new connection; each must
answer 200 with vramd_up 1 within BOUND seconds, and their median within
MEDIAN seconds. The latencies are printed (with their median and maximum)
whatever the outcome.

Also checked: the attackers did hold connections during the scrapes, and
none that the endpoint kept outlived its bounds (a first head within 5 s of
the accept, an idle keep-alive connection closed after 10 s), with 2 s
of slack. With --pid, the endpoint's CPU time while every attacker holds
its connections without reopening them (--hold-still): it must not spin.

Usage: attack.py HOST:PORT [--conns N] [--addrs N] [--scrapes N]
                 [--bound S] [--median-bound S] [--reopen-per-s N]
                 [--pid PID] [--hold-still] [--same-address]
Exits 1, after printing every failure, when anything failed."""
import argparse
import errno
import multiprocessing
import os
import resource
import selectors
import socket
import statistics
import sys
import time

HEAD_S, IDLE_S, SLACK_S = 5.0, 10.0, 2.0
GET = b"GET /metrics HTTP/1.1\r\nHost: attack\r\n\r\n"
SLOW = b"GET /metrics HTTP/1.1\r\nHost: attack\r\nX-Slow: " + b"a" * 4000
KINDS = ("idle", "slow", "keep")


class Conn:
    __slots__ = ("i", "kind", "src", "sock", "state", "since", "idle_since",
                 "sent", "buf", "next_byte")

    def __init__(self, i, kind, src):
        self.i, self.kind, self.src = i, kind, src
        self.sock = None
        self.state = "closed"


def attacker(addr, conns, addrs, reopen_per_s, same, pipe):
    """The attacking peers, in one process, until the pipe says stop.
    Reports ('ready',) once every connection was opened once, then on
    'stats' the connections open now and on 'stop' the totals."""
    sel = selectors.DefaultSelector()
    all_ = [Conn(i, KINDS[i % 3], "127.0.0.1" if same else f"127.0.1.{1 + i % addrs}")
            for i in range(conns)]
    reopen = list(all_)
    st = {"connects": 0, "closed_by_server": 0, "failed_connects": 0,
          "longest": {k: 0.0 for k in KINDS}, "scrapes": 0}
    ready_sent = False
    hold_still = False
    opened_once = 0

    def close(c, by_server, now):
        if c.sock is None:
            return
        if by_server and c.state != "connecting":
            st["closed_by_server"] += 1
            # How long the endpoint kept it idle: since the accept, or
            # since its scrape's answer (keep-alive).
            kept = now - (c.idle_since if c.idle_since else c.since)
            if kept > st["longest"][c.kind]:
                st["longest"][c.kind] = kept
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.sock = None
        c.state = "closed"
        reopen.append(c)

    def open_(c, now):
        nonlocal opened_once
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((c.src, 0))
            e = s.connect_ex(addr)
        except OSError as ex:
            e = ex.errno
        if e not in (0, errno.EINPROGRESS):
            s.close()
            st["failed_connects"] += 1
            reopen.append(c)
            return
        c.sock, c.state, c.since, c.idle_since = s, "connecting", now, 0.0
        c.sent, c.buf, c.next_byte = 0, b"", now
        if c.i >= opened_once:
            opened_once = c.i + 1
        sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ, c)
        st["connects"] += 1

    def on_event(c, ev, now):
        if c.state == "connecting":
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                st["failed_connects"] += 1
                close(c, False, now)
                return
            c.state, c.since = "open", now
            sel.modify(c.sock, selectors.EVENT_READ, c)
            if c.kind == "keep":
                try:
                    c.sock.send(GET)
                except OSError:
                    close(c, True, now)
                    return
                c.state = "asking"
            if not ev & selectors.EVENT_READ:
                return
        try:
            d = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            d = b""
        if not d:
            close(c, True, now)
            return
        if c.state == "asking":
            c.buf += d
            head, sep, body = c.buf.partition(b"\r\n\r\n")
            if sep:
                n = 0
                for ln in head.split(b"\r\n"):
                    if ln.lower().startswith(b"content-length:"):
                        n = int(ln.split(b":", 1)[1])
                if len(body) >= n:
                    c.state, c.idle_since, c.buf = "open", now, b""
                    st["scrapes"] += 1

    tick = 0.02
    budget = 0.0
    last = time.monotonic()
    while True:
        now = time.monotonic()
        budget = min(budget + (now - last) * reopen_per_s, reopen_per_s * 0.1)
        last = now
        while reopen and budget >= 1 and not hold_still:
            budget -= 1
            open_(reopen.pop(0), now)
        if not ready_sent and opened_once >= conns:
            pipe.send(("ready",))
            ready_sent = True
        for c in all_:
            if c.kind == "slow" and c.state == "open" and c.sock and now >= c.next_byte \
                    and c.sent < len(SLOW):
                try:
                    c.sock.send(SLOW[c.sent:c.sent + 1])
                    c.sent += 1
                except OSError:
                    pass
                c.next_byte = now + 1.0
        for key, ev in sel.select(timeout=tick):
            on_event(key.data, ev, time.monotonic())
        if pipe.poll():
            msg = pipe.recv()
            if msg == "hold-still":
                hold_still = True
            elif msg == "stats":
                pipe.send(("open", sum(1 for c in all_ if c.state in ("open", "asking"))))
            else:
                for c in all_:
                    if c.sock is not None:
                        sel.unregister(c.sock)
                        c.sock.close()
                pipe.send(("stats", st))
                return


def scrape(addr, timeout):
    """(status, body, seconds) of one scrape on a new connection."""
    t0 = time.monotonic()
    status, data = -1, b""
    try:
        with socket.create_connection(addr, timeout=timeout,
                                      source_address=("127.0.0.1", 0)) as s:
            s.settimeout(max(0.1, timeout - (time.monotonic() - t0)))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: scraper\r\nConnection: close\r\n\r\n")
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
    except OSError as e:
        data += f"[{type(e).__name__}: {e}]".encode()
    took = time.monotonic() - t0
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) > 1 and parts[1].isdigit():
        status = int(parts[1])
    return status, body if status > 0 else data, took


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--addrs", type=int, default=50)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--bound", type=float, default=1.0)
    ap.add_argument("--median-bound", type=float, default=1.0)
    ap.add_argument("--reopen-per-s", type=int, default=2000)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--hold-still", action="store_true")
    # A measurement, not a test: the attackers on the scraper's own address,
    # which no per-address limit can tell apart.
    ap.add_argument("--same-address", action="store_true")
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    addr = (host, int(port))
    failures = []

    # 1,000 sockets need more than the usual 1,024 fds with Python's own.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.conns + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            print(f"attack: needs {need} open files, the hard limit is {hard}")
            return 1
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))

    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=attacker, args=(addr, a.conns, a.addrs, a.reopen_per_s,
                                                 a.same_address, theirs))
    p.start()
    t_start = time.monotonic()
    try:
        if not mine.poll(120):
            print("attack: the attackers did not open their connections in 120 s")
            return 1
        mine.recv()
        time.sleep(1.0)  # the endpoint's slots are all taken by now
        results, held = [], []
        for k in range(a.scrapes):
            t_next = time.monotonic() + 0.5
            status, body, took = scrape(addr, max(10.0, 3 * a.bound))
            mine.send("stats")
            held.append(mine.recv()[1])
            results.append((status, took))
            ok = status == 200 and b"vramd_up 1" in body
            if not ok:
                failures.append(f"scrape {k + 1}: status {status} after {took:.3f} s: "
                                f"{body[:120]!r}")
            elif took > a.bound:
                failures.append(f"scrape {k + 1}: took {took:.3f} s (bound {a.bound} s)")
            time.sleep(max(0.0, t_next - time.monotonic()))
        hold_cpu = None
        if a.hold_still and a.pid:
            # Every attacker holds what it has and opens nothing more: the
            # endpoint, with connections it turned away or cannot serve
            # waiting, must sit still.
            mine.send("hold-still")
            time.sleep(1.0)
            c0 = cpu_s(a.pid)
            time.sleep(2.0)
            hold_cpu = cpu_s(a.pid) - c0
            status, body, took = scrape(addr, 10.0)
            if status != 200:
                failures.append(f"a scrape while they hold still: status {status}")
        # Long enough for every bound to have ended some connection.
        while time.monotonic() - t_start < IDLE_S + SLACK_S + 1.5:
            time.sleep(0.2)
        mine.send("stop")
        st = mine.recv()[1] if mine.poll(30) else None
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()

    lat = sorted(t for s, t in results)
    okn = sum(1 for s, _ in results if s == 200)
    print(f"attack: {a.conns} connections from {a.addrs} addresses "
          f"(idle, slow at 1 byte/s, keep-alive then idle; reopened when closed, "
          f"up to {a.reopen_per_s}/s)")
    print("attack: scrape latencies (s): " + " ".join(f"{t:.3f}" for _, t in results))
    if lat:
        print(f"attack: {okn} of {len(results)} scrapes answered 200; median "
              f"{statistics.median(lat):.3f} s, max {lat[-1]:.3f} s (bound {a.bound} s)")
    if lat and statistics.median(lat) > a.median_bound:
        failures.append(f"the median scrape took {statistics.median(lat):.3f} s "
                        f"(bound {a.median_bound} s)")
    if held:
        print(f"attack: connections the attackers held open during the scrapes: "
              f"{min(held)} to {max(held)}")
        if min(held) < 1:
            failures.append("the attackers held no connection: no attack happened")
    if hold_cpu is not None:
        print(f"attack: the endpoint's CPU in 2 s with connections held still: "
              f"{hold_cpu * 1000:.0f} ms")
        if hold_cpu > 0.3:
            failures.append(f"the endpoint used {hold_cpu * 1000:.0f} ms of CPU in 2 s "
                            "while nothing changed (spinning)")
    if st is None:
        failures.append("the attackers did not report")
    else:
        lg = st["longest"]
        print(f"attack: {st['connects']} connects, {st['closed_by_server']} closed by the "
              f"endpoint, {st['failed_connects']} failed, {st['scrapes']} keep-alive "
              f"scrapes; longest kept idle: idle {lg['idle']:.1f} s, slow "
              f"{lg['slow']:.1f} s, keep-alive {lg['keep']:.1f} s")
        if lg["idle"] > HEAD_S + SLACK_S or lg["slow"] > HEAD_S + SLACK_S:
            failures.append(f"a connection without a whole head was kept "
                            f"{max(lg['idle'], lg['slow']):.1f} s (head deadline {HEAD_S} s)")
        if lg["keep"] > IDLE_S + SLACK_S:
            failures.append(f"an idle keep-alive connection was kept {lg['keep']:.1f} s "
                            f"(idle timeout {IDLE_S} s)")
    for f in failures:
        print("attack:", f)
    print(f"attack: {'0 failed' if not failures else str(len(failures)) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
