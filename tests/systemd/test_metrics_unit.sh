#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd-metrics.service: systemd-analyze verify passes on it beside
# vramd.socket and vramd.service (the build's, and the ones installed into a
# temporary prefix, whose ExecStart names the prefix's vramctl); it runs
# after vramd.socket without stopping with vramd, as a user in group vramd;
# and its command, run from the installed prefix (on a free port and a
# temporary vramd), serves the metrics. The temporary folder is removed
# when the test passes, kept (and named) when it fails.
# Usage: test_metrics_unit.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
for tool in systemd-analyze curl; do
    command -v $tool >/dev/null ||
        { echo "metrics_unit: $tool is needed (sh scripts/deps.sh --test)"; exit 1; }
done
name=metrics_unit pids="exporter vramd"
vramd= exporter=
. "$src/tests/lib/shtest.sh"
verify() { # what, then unit files
    what=$1
    shift
    out=$(systemd-analyze verify --man=no "$@" 2>&1)
    [ $? = 0 ] && [ -z "$out" ] || fail "systemd-analyze verify ($what): $out"
}

# 1. The build's units, ExecStart pointing at this build.
mkdir "$tmp/build-units"
cp "$build/vramd.service" "$build/vramd-metrics.service" "$src/systemd/vramd.socket" \
    "$tmp/build-units/" || fail "the build has no vramd-metrics.service"
sed -i "s|^ExecStart=[^ ]*/vramd |ExecStart=$build/vramd |" "$tmp/build-units/vramd.service"
sed -i "s|^ExecStart=[^ ]*/vramctl |ExecStart=$build/vramctl |" \
    "$tmp/build-units/vramd-metrics.service"
u=$tmp/build-units/vramd-metrics.service
verify build "$tmp/build-units/vramd.socket" "$tmp/build-units/vramd.service" "$u"
grep -q '^After=vramd.socket' "$u" || fail "not After=vramd.socket"
grep -q '^Wants=vramd.socket' "$u" || fail "not Wants=vramd.socket"
grep -q '^Requires=' "$u" && fail "Requires: stopping vramd would stop the endpoint"
grep -q '^SupplementaryGroups=vramd$' "$u" || fail "not in group vramd (the socket's)"
grep -q '^RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6$' "$u" ||
    fail "the address families it needs"
grep -q '^ExecStart=.* metrics --listen 127.0.0.1:8726$' "$u" || fail "its ExecStart"

# 2. Installed into a prefix: the prefix's vramctl, nothing left to fill.
p=$tmp/prefix
cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1 ||
    fail "cmake --install: $(tail -5 "$tmp/install.log")"
iu=$p/lib/systemd/system/vramd-metrics.service
[ -f "$iu" ] || fail "vramd-metrics.service not installed"
grep -q "^ExecStart=$p/bin/vramctl metrics --listen 127.0.0.1:8726\$" "$iu" ||
    fail "the installed ExecStart: $(grep ExecStart "$iu")"
grep -q '@[A-Z_]*@' "$iu" && fail "an unfilled @VAR@ in the installed unit"
verify installed "$p/lib/systemd/system/vramd.socket" "$p/lib/systemd/system/vramd.service" "$iu"

# 3. Its command, from the prefix, serves (on a free port, a vramd of ours).
start_vramd
cmd=$(sed -n 's/^ExecStart=//p' "$iu" | sed 's/127.0.0.1:8726/127.0.0.1:0/')
# shellcheck disable=SC2086
: >"$tmp/exporter.out"
env VRAM_SOCKET="$sock" $cmd >"$tmp/exporter.out" 2>"$tmp/exporter.err" &
exporter=$!
i=0
until grep -q 'serving http://' "$tmp/exporter.out"; do
    i=$((i + 1)); [ $i -lt 100 ] || fail "the unit's command did not serve: $(cat "$tmp/exporter.err")"
    sleep 0.05
done
addr=$(sed -n 's|.*serving http://\([0-9.]*:[0-9]*\)/metrics.*|\1|p' "$tmp/exporter.out")
code=$(curl -sS --max-time 20 -o "$tmp/body" -w '%{http_code}' "http://$addr/metrics")
[ "$code" = 200 ] && grep -q '^vramd_up 1$' "$tmp/body" ||
    fail "the unit's command answered $code"

passed=1
echo "metrics_unit: 1 passed, 0 failed"
