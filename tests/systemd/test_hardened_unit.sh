#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd runs under its own hardened units, applied by a real systemd
# (tests/lib/sd_manager.sh: a manager of the test's own, in a mount
# namespace whose /run is its own): the build's vramd.socket and
# vramd.service as cmake renders them, ExecStart pointed at this build (host
# backend, examples/engine.json), as user vramd (in this namespace's
# /etc/passwd only). The first connection, the example engine's as another
# user (nobody, in group vramd), starts vramd by socket activation; it
# becomes active through sd_notify, serves the engine and vramctl, keeps its
# state file in /run/vramd, and runs with the filter (Seccomp 2), no_new_privs,
# no capability and a network namespace of its own. Killed with SIGKILL, it
# is started again (Restart=on-failure) and serves again. Then
# vramd-metrics.service's command serves vramd_up 1 under its own unit's
# settings (as nobody: a manager of a user's has no DynamicUser=).
# Its output and the units are kept in the build folder (a service's /tmp
# is its own), removed when it passes.
# Exits 77 (skipped) where no manager can run (no root, systemd or mount
# namespace) and where PID 1 is systemd (the units would be the system's).
# Usage: test_hardened_unit.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
. "$src/tests/lib/sd_manager.sh"
command -v setpriv >/dev/null || { echo "skipped: no setpriv (util-linux)"; exit 77; }
command -v curl >/dev/null || { echo "skipped: no curl"; exit 77; }
tmp=$(mktemp -d "$build/hardened-unit-XXXXXX")
chmod 755 "$tmp"
passed=0
cleanup() {
    [ -n "$sd_mgr" ] && kill -9 "$sd_mgr" 2>/dev/null || true
    # The manager's services outlive it: this test's, should a failure
    # have left them running (the own manager's only: its units' paths).
    for p in $(cat "$tmp"/*.pid 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    if [ $passed = 1 ]; then rm -rf "$tmp"; else echo "hardened_unit: kept $tmp"; fi
}
trap cleanup EXIT

# The units, rendered by cmake, run this build's programs. Their names get
# this run's id: the managers of concurrent runs share the cgroup tree, in
# which a unit's name is its cgroup's. ProtectHome=yes hides a build under
# /home or /root: there it is read-only instead.
id=$(basename "$tmp" | cut -d- -f3)
d=vramd-$id m=vramd-metrics-$id
mkdir -p "$tmp/units/$d.service.d" "$tmp/units/$m.service.d"
for u in vramd.service vramd-metrics.service vramd.socket; do
    f=$build/$u
    [ -f "$f" ] || f=$src/systemd/$u
    sed -e "s/vramd\.socket/$d.socket/g; s/vramd\.service/$d.service/g" \
        -e "s|^ExecStart=[^ ]*/vramd |ExecStart=$build/vramd --config $src/examples/engine.json |" \
        -e "s|^ExecStart=[^ ]*/vramctl metrics --listen 127.0.0.1:8726|ExecStart=$build/vramctl metrics --listen 127.0.0.1:0|" \
        -e "s|^DynamicUser=yes|User=nobody|" "$f" >"$tmp/units/$(echo "$u" | sed "s/^vramd/vramd-$id/; s/^vramd-$id-metrics/$m/")"
done
home=
case "$build $src" in
/home/* | /root/* | *" /home/"* | *" /root/"*) home="ProtectHome=read-only" ;;
esac
# No journal in the namespace: the output goes to files.
for u in $d $m; do
    printf '[Service]\nStandardOutput=append:%s\nStandardError=inherit\n%s\n' \
        "$tmp/${u%-$id}.log" "$home" >"$tmp/units/$u.service.d/test.conf"
done

cat >"$tmp/run.sh" <<EOF
set -eu
# User vramd, in this namespace's /etc/passwd and /etc/group only.
uid=64123
while getent passwd \$uid >/dev/null || getent group \$uid >/dev/null; do uid=\$((uid + 1)); done
cp /etc/passwd $tmp/passwd; cp /etc/group $tmp/group
echo "vramd:x:\$uid:\$uid:vramd GPU memory broker:/nonexistent:/usr/sbin/nologin" >>$tmp/passwd
echo "vramd:x:\$uid:" >>$tmp/group
mount --bind $tmp/passwd /etc/passwd
mount --bind $tmp/group /etc/group
# A system manager's notify socket takes anyone's datagrams (0777); a user
# manager's, which this is, only its user's, and vramd is another.
chmod 777 \$XDG_RUNTIME_DIR/systemd/notify
bad() { echo "hardened_unit: \$*" >&2; exit 1; }
active() { # unit: waits for it to be active, prints its main pid
    i=0
    until [ "\$(systemctl \$user show -P ActiveState \$1)" = active ]; do
        i=\$((i + 1))
        [ \$i -lt 200 ] || bad "\$1 is \$(systemctl \$user show -P ActiveState \$1): \$(systemctl \$user status \$1 2>&1 | tail -5)"
        sleep 0.05
    done
    systemctl \$user show -P MainPID \$1
}
engine() { # as nobody in group vramd: a user of its own, not vramd's
    setpriv --reuid=65534 --regid=65534 --groups=\$uid --inh-caps=-all \
        $build/vram-example-engine /run/vramd/vramd.sock 0 >$tmp/engine.out 2>&1 ||
        bad "the engine failed: \$(tail -5 $tmp/engine.out); vramd: \$(tail -5 $tmp/vramd.log)"
    grep -q '^engine: done\$' $tmp/engine.out || bad "the engine did not finish"
}

systemctl \$user start $d.socket
ls -l /run/vramd/vramd.sock | grep -q '^srw-rw---- .* root vramd ' ||
    bad "the socket: \$(ls -l /run/vramd/vramd.sock)"
[ "\$(systemctl \$user show -P ActiveState $d.service)" = inactive ] ||
    bad "vramd started before its first connection"
engine
pid=\$(active $d.service)
echo \$pid >$tmp/vramd.pid
echo "vramd: pid \$pid, started by the engine's connection (uid 65534), served it"
grep -q "socket passed by the service manager" $tmp/vramd.log ||
    bad "vramd was not socket-activated: \$(tail -5 $tmp/vramd.log)"
grep -q "weight sets are kept by the fd store" $tmp/vramd.log ||
    bad "vramd does not use the fd store: \$(grep -i 'weight\\|keep' $tmp/vramd.log | head -3)"
$build/vramctl --socket /run/vramd/vramd.sock status --json >$tmp/status.json
grep -q '"capacity_bytes"' $tmp/status.json || bad "no status"
[ -f /run/vramd/vramd.sock.state ] && [ "\$(stat -c %U /run/vramd/vramd.sock.state)" = vramd ] ||
    bad "no state file of vramd's: \$(ls -l /run/vramd)"
# What the unit applied.
st=/proc/\$pid/status
grep -q "^Uid:[[:space:]]*\$uid[[:space:]]" \$st || bad "not user vramd: \$(grep Uid \$st)"
grep -q '^Seccomp:[[:space:]]*2\$' \$st || bad "no system call filter: \$(grep Seccomp \$st)"
grep -q '^NoNewPrivs:[[:space:]]*1\$' \$st || bad "no no_new_privs"
grep -q '^CapBnd:[[:space:]]*0*\$' \$st || bad "capabilities left: \$(grep CapBnd \$st)"
[ "\$(readlink /proc/\$pid/ns/net)" != "\$(readlink /proc/self/ns/net)" ] ||
    bad "vramd shares the host's network namespace"
[ "\$(readlink /proc/\$pid/ns/mnt)" != "\$(readlink /proc/self/ns/mnt)" ] ||
    bad "vramd shares the manager's mount namespace"
echo "vramd: \$(grep -E '^(Seccomp|NoNewPrivs|CapBnd):' \$st | tr -s '\t\n' '  ')net \$(readlink /proc/\$pid/ns/net)"

# SIGKILL: started again, it serves again.
kill -9 \$pid
i=0
while [ "\$(systemctl \$user show -P MainPID $d.service)" = "\$pid" ] ||
      [ "\$(systemctl \$user show -P ActiveState $d.service)" != active ]; do
    i=\$((i + 1)); [ \$i -lt 200 ] || bad "vramd was not started again"
    sleep 0.05
done
pid=\$(active $d.service)
echo \$pid >$tmp/vramd.pid
engine
echo "vramd: started again after SIGKILL (pid \$pid), served the engine again"

# vramctl metrics under its own unit's settings.
systemctl \$user start $m.service
mpid=\$(active $m.service)
echo \$mpid >$tmp/metrics.pid
i=0
until grep -q 'serving http://' $tmp/vramd-metrics.log 2>/dev/null; do
    i=\$((i + 1)); [ \$i -lt 200 ] || bad "the metrics unit did not serve: \$(tail -5 $tmp/vramd-metrics.log)"
    sleep 0.05
done
addr=\$(sed -n 's|.*serving http://\([0-9.]*:[0-9]*\)/metrics.*|\1|p' $tmp/vramd-metrics.log)
curl -sS --max-time 20 -o $tmp/metrics.body "http://\$addr/metrics"
grep -q '^vramd_up 1\$' $tmp/metrics.body || bad "the metrics unit's endpoint: \$(head -5 $tmp/metrics.body)"
grep -q '^Seccomp:[[:space:]]*2\$' /proc/\$mpid/status || bad "the metrics unit has no filter"
echo "vramd-metrics: pid \$mpid served vramd_up 1 at \$addr"
systemctl \$user stop $m.service $d.service $d.socket
echo ok >$tmp/done
EOF

rc=0
sd_runtime=/run sd_own_only=1 sd_manager_run "$tmp" "$tmp/run.sh" >"$tmp/run.log" 2>&1 || rc=$?
cat "$tmp/run.log"
if [ $rc -eq 77 ]; then passed=1; exit 77; fi
if [ $rc -ne 0 ] || [ ! -f "$tmp/done" ]; then
    echo "vramd's log (end):"; tail -20 "$tmp/vramd.log" 2>/dev/null | sed 's/^/  /' || true
    echo "the manager's log (end):"; tail -20 "$tmp/manager.log" 2>/dev/null | sed 's/^/  /' || true
    echo "hardened_unit: 0 passed, 1 failed"
    exit 1
fi
passed=1
echo "hardened_unit: 1 passed, 0 failed"
