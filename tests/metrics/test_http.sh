#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramctl metrics --listen: the real vramd on a temporary socket with the
# seed replay holding memory, the endpoint on a port of its choosing
# (127.0.0.1:0, read from the line it prints), scraped with curl: 200 with
# the exposition's content type, a body promtool accepts with per-device,
# per-stage and per-client series and vramd_up 1; 404, 405, HEAD; parallel
# scrapes; raw malformed, oversized, pipelined and random requests, the
# limits on connections and their deadlines (http_raw.py); a
# second endpoint on the same port refused; 200 with the reason and
# vramd_up 0 once vramd is killed, the endpoint still serving, and 200
# again once vramd is back, also when vramd restarted between two scrapes
# (the kept connection is made again within the scrape). The temporary
# folder is removed when the test passes, kept (and named) when it fails.
# Usage: test_http.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
for tool in curl promtool python3; do
    command -v $tool >/dev/null ||
        { echo "metrics_http: $tool is needed (sh scripts/deps.sh --test)"; exit 1; }
done
name=metrics_http pids="exporter replay vramd"
keep_note="vramd.log, exporter.err, the bodies"
vramd= replay= exporter=
. "$src/tests/lib/shtest.sh"
config=$src/tests/scenarios/seed-pp32-16.json

kill_vramd() {
    kill -9 "$vramd"
    wait "$vramd" 2>/dev/null
    vramd=
}
# scrape NAME [curl options]: the status code, the body in $tmp/NAME.body
# and the headers in $tmp/NAME.head.
scrape() {
    name=$1
    shift
    curl -sS --max-time 30 -D "$tmp/$name.head" -o "$tmp/$name.body" \
        -w '%{http_code}' "$@" 2>>"$tmp/curl.err"
}

start_vramd
: >"$tmp/replay" # the loop below may look before the job opens it
"$build/vram-replay" --socket "$sock" --hold "$config" >"$tmp/replay" 2>&1 &
replay=$!
i=0
until grep -q holding "$tmp/replay"; do
    i=$((i + 1)); [ $i -lt 200 ] || fail "the replay did not finish: $(cat "$tmp/replay")"
    sleep 0.05
done

# The endpoint, on a free port; the line it prints names it.
: >"$tmp/exporter.out"
"$build/vramctl" --socket "$sock" metrics --listen 127.0.0.1:0 \
    >"$tmp/exporter.out" 2>"$tmp/exporter.err" &
exporter=$!
i=0
until grep -q 'serving http://' "$tmp/exporter.out"; do
    i=$((i + 1)); [ $i -lt 100 ] || fail "no address printed: $(cat "$tmp/exporter.out" "$tmp/exporter.err")"
    sleep 0.05
done
addr=$(sed -n 's|.*serving http://\([0-9.]*:[0-9]*\)/metrics.*|\1|p' "$tmp/exporter.out")
port=${addr##*:}
[ -n "$addr" ] && [ "$port" != 0 ] || fail "no bound port in: $(cat "$tmp/exporter.out")"
url=http://$addr/metrics

# 1. A scrape.
code=$(scrape ok "$url")
[ "$code" = 200 ] || fail "GET /metrics: $code"
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$tmp/ok.head" ||
    fail "content type: $(cat "$tmp/ok.head")"
promtool check metrics <"$tmp/ok.body" >"$tmp/promtool.out" 2>&1 ||
    fail "promtool check metrics: $(cat "$tmp/promtool.out")"
grep -q '^vramd_up 1$' "$tmp/ok.body" || fail "no vramd_up 1"
grep -q '^vramd_stage_expert_loaned_bytes{stage="0",device="0"} 2046820352$' "$tmp/ok.body" ||
    fail "stage 0's 1952 MiB of loans not in the metrics"
grep -q '^vramd_device_kv_bytes{device="1",backend="host"} 104857600$' "$tmp/ok.body" ||
    fail "device 1's 100 MiB of KV not in the metrics"
# Per client: stage 0's engine holds its 160 MiB of KV and 1952 MiB of loans.
grep -Eq '^vramd_client_held_bytes\{client="[0-9]+",name="replay-stage-0"\} 2214592512$' \
    "$tmp/ok.body" || fail "no per-client held bytes for replay-stage-0"
grep -Eq '^vramd_client_info\{client="[0-9]+",name="replay-stage-1",pid="[0-9]+",state="connected",role="engine"\} 1$' \
    "$tmp/ok.body" || fail "no vramd_client_info for replay-stage-1"
# The exporter's own connection is a control client: no series of its own.
grep -q 'name="vramctl' "$tmp/ok.body" && fail "control clients have series"

# 2. HEAD (that it sends no body is checked in http_raw.py, where a
# pipelined request follows it), other paths, other methods.
code=$(scrape head -I "$url")
[ "$code" = 200 ] && grep -qi '^content-length: [1-9]' "$tmp/head.head" ||
    fail "HEAD: $code $(cat "$tmp/head.head")"
for path in / /metric /metrics/ /favicon.ico; do
    code=$(scrape nf "http://$addr$path")
    [ "$code" = 404 ] || fail "GET $path: $code, expected 404"
done
for m in POST PUT DELETE OPTIONS; do
    code=$(scrape na -X $m "$url")
    [ "$code" = 405 ] && grep -qi '^allow: GET, HEAD' "$tmp/na.head" ||
        fail "$m /metrics: $code, expected 405 with Allow: $(cat "$tmp/na.head")"
done
# Several scrapes at once are all answered: 8 from 8 addresses (any
# 127.0.0.0/8 address is this host), and 4 from one (the most one address
# may have at once).
for round in 8 4; do
    for n in $(seq 1 $round); do
        from=127.0.0.1
        [ $round = 8 ] && from=127.0.4.$n
        rm -f "$tmp/par$n.code"
        scrape "par$n" --interface $from "$url" >"$tmp/par$n.code" &
    done
    wait_par=0
    while [ $wait_par -lt 400 ]; do
        done_n=0
        for n in $(seq 1 $round); do [ -s "$tmp/par$n.code" ] && done_n=$((done_n + 1)); done
        [ $done_n = $round ] && break
        wait_par=$((wait_par + 1)); sleep 0.05
    done
    for n in $(seq 1 $round); do
        [ "$(cat "$tmp/par$n.code" 2>/dev/null)" = 200 ] ||
            fail "parallel scrape $n of $round: $(cat "$tmp/par$n.code" 2>/dev/null)"
    done
done

# 3. What curl will not send.
python3 "$src/tests/metrics/http_raw.py" "$addr" --slow >"$tmp/raw.out" 2>&1 ||
    fail "raw requests: $(cat "$tmp/raw.out")"
kill -0 "$exporter" 2>/dev/null || fail "the endpoint died of the raw requests"

# 4. The port taken, and a bad address.
if "$build/vramctl" --socket "$sock" metrics --listen "$addr" >/dev/null 2>"$tmp/second.err"; then
    fail "a second endpoint on $addr started"
fi
grep -q 'cannot listen on .*address already in use' "$tmp/second.err" ||
    fail "a taken port: $(cat "$tmp/second.err")"
"$build/vramctl" --socket "$sock" metrics --listen 127.0.0.1 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q 'not ADDR:PORT' "$tmp/bad.err" || fail "--listen 127.0.0.1: $(cat "$tmp/bad.err")"

# 5. vramd killed: 200 (as exporters answer: the scraper stores the
# sample) with vramd_up 0, saying why; the endpoint lives on.
kill_vramd
code=$(scrape down "$url")
[ "$code" = 200 ] || fail "a scrape while vramd is down: $code"
grep -q "^# no vramd at $sock (is it running? VRAM_SOCKET" "$tmp/down.body" &&
    grep -q '^vramd_up 0$' "$tmp/down.body" || fail "the down body: $(cat "$tmp/down.body")"
promtool check metrics <"$tmp/down.body" >"$tmp/promtool.out" 2>&1 ||
    fail "promtool on the down body: $(cat "$tmp/promtool.out")"
code=$(scrape down2 "$url")
[ "$code" = 200 ] || fail "a second scrape while vramd is down: $code"
kill -0 "$exporter" 2>/dev/null || fail "the endpoint ended with vramd"
# The one-shot command says the same, for a textfile collector's file.
"$build/vramctl" --socket "$sock" metrics >"$tmp/oneshot.body" 2>/dev/null
[ $? = 3 ] && grep -q '^vramd_up 0$' "$tmp/oneshot.body" ||
    fail "vramctl metrics without vramd: $(cat "$tmp/oneshot.body")"

# 6. vramd back: 200 again.
start_vramd
code=$(scrape back "$url")
[ "$code" = 200 ] && grep -q '^vramd_up 1$' "$tmp/back.body" ||
    fail "after vramd restarted: $code"
# 7. vramd restarted between two scrapes: the kept connection broke, and
# the scrape makes a new one instead of failing.
kill_vramd
start_vramd
code=$(scrape again "$url")
[ "$code" = 200 ] || fail "the first scrape after a restart between scrapes: $code"
grep -q 'is not readable: no vramd at ' "$tmp/exporter.err" &&
    grep -q 'reading vramd on' "$tmp/exporter.err" || fail "its log: $(cat "$tmp/exporter.err")"

# 8. SIGTERM ends it cleanly.
kill -TERM "$exporter"
i=0
while kill -0 "$exporter" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || fail "the endpoint did not stop on SIGTERM"
    sleep 0.05
done
wait "$exporter"
rc=$?
exporter=
[ $rc = 0 ] || fail "the endpoint exited $rc on SIGTERM"

passed=1
echo "metrics_http: 1 passed, 0 failed"
