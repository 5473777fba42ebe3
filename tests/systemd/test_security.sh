#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The units' hardening holds: `systemd-analyze security --offline=yes` rates
# the build's vramd.service at 2.0 ("OK") or less and vramd-metrics.service
# at 1.5 or less, and tests/systemd/vramd.syscalls (the list vram-seccomp
# applies where systemd does not) is still what both units' SystemCallFilter=
# expands to, where this systemd is the one that expanded it.
# Exits 77 (skipped) without systemd-analyze, or with one that has no
# --offline (systemd 250 and later have it).
# Usage: test_security.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
name=security pids=""
command -v systemd-analyze >/dev/null || { echo "skipped: no systemd-analyze"; exit 77; }
. "$src/tests/lib/shtest.sh"
fails=0
bad() { echo "security: $*"; fails=$((fails + 1)); }

# The unit files must be named *.service; ExecStart must name a program.
for u in vramd vramd-metrics; do
    cp "$build/$u.service" "$tmp/" || fail "the build has no $u.service"
    sed -i "s|^ExecStart=[^ ]*|ExecStart=/bin/true|" "$tmp/$u.service"
done
cp "$src/systemd/vramd.socket" "$tmp/"
cd "$tmp" || fail "cd $tmp"
if ! systemd-analyze security --offline=yes --no-pager vramd.service >"$tmp/probe" 2>&1 &&
    grep -q "unrecognized option\|Unknown option" "$tmp/probe"; then
    passed=1
    echo "skipped: this systemd-analyze has no --offline ($(systemctl --version | head -1))"
    exit 77
fi
score() { # unit bound: its overall exposure, checked against the bound
    systemd-analyze security --offline=yes --no-pager "$1" >"$tmp/$1.txt" 2>&1
    line=$(grep 'Overall exposure level' "$tmp/$1.txt")
    [ -n "$line" ] || { bad "$1: no overall exposure: $(tail -3 "$tmp/$1.txt")"; return; }
    echo "security: $(echo "$line" | sed 's/^.*Overall/overall/')"
    n=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) .*/\1/p')
    if awk -v n="$n" -v b="$2" 'BEGIN { exit !(n > b) }'; then
        bad "$1 is rated $n, above $2; what it lacks:"
        grep '✗' "$tmp/$1.txt" | sed 's/  */ /g; s/^/  /'
    fi
}
score vramd.service 2.0
score vramd-metrics.service 1.5

# The wrapper's list: both units filter the same calls, and the committed
# list is their expansion by the systemd version named in it.
list=$src/tests/systemd/vramd.syscalls
for u in vramd vramd-metrics; do
    grep '^SystemCallFilter=' "$tmp/$u.service"
done | sort | uniq -c | awk '$1 != 2 { bad = 1 } END { exit bad }' ||
    bad "vramd.service and vramd-metrics.service filter different calls"
made_by=$(sed -n 's/^# as systemd \([0-9]*\) expands.*/\1/p' "$list")
here=$(systemctl --version 2>/dev/null | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
if [ "$made_by" = "$here" ]; then
    sh "$src/tests/systemd/syscall_list.sh" "$src/systemd/vramd.service.in" >"$tmp/list" ||
        bad "syscall_list.sh failed"
    diff -u "$list" "$tmp/list" >"$tmp/list.diff" ||
        bad "tests/systemd/vramd.syscalls is not the unit's filter; regenerate it" \
            "(sh tests/systemd/syscall_list.sh systemd/vramd.service.in):" \
            "$(cat "$tmp/list.diff")"
else
    echo "security: vramd.syscalls was expanded by systemd $made_by, this is ${here:-none}: not compared"
fi

[ $fails -eq 0 ] || { echo "security: 0 passed, 1 failed"; exit 1; }
passed=1
echo "security: 1 passed, 0 failed"
