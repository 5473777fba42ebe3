# SPDX-License-Identifier: Apache-2.0
# A systemd service manager for the tests that need one (the fd store):
# sourced; sd_manager_run DIR BODY runs the shell script BODY with $user
# set to the systemctl/systemd-run flag that reaches the manager.
#
# Where PID 1 is systemd, the system manager runs the services ($user
# empty). Where it is not (a container, as on the machines this was written
# on), a manager of the test's own does: systemd --user, in a private mount
# namespace whose /run is a tmpfs that says the system runs systemd
# (/run/systemd/system), with no units but a few empty targets of the
# test's own ($user is --user). The service manager's fd store is the same
# code in both.
#
# The own manager's runtime directory ($XDG_RUNTIME_DIR, where its units'
# RuntimeDirectory= go) is $sd_runtime where the test sets it (/run, as a
# system manager's, for units whose sockets are in /run), else DIR/xdg. A
# test that sets sd_own_only=1 runs only under a manager of its own (its
# units would otherwise go into the system's): 77 where PID 1 is systemd.
#
# sd_manager_run returns BODY's status, or 77 (skip) where no manager can
# run: no root, no systemd, no mount namespace. $sd_mgr is then the own
# manager's pid (kill it at cleanup), or empty.
sd_mgr=
sd_manager_run() { # DIR BODY
    sd_dir=$1 sd_body=$2
    [ "$(id -u)" = 0 ] || { echo "skipped: needs root"; return 77; }
    for t in systemd-run systemctl; do
        command -v "$t" >/dev/null || { echo "skipped: no $t"; return 77; }
    done
    if [ -d /run/systemd/system ] && [ "$(cat /proc/1/comm)" = systemd ]; then
        if [ "${sd_own_only:-0}" = 1 ]; then
            echo "skipped: PID 1 is systemd, and this test's units would be the system's"
            return 77
        fi
        echo "PID 1 is systemd $(systemctl --version | head -1 | cut -d' ' -f2): transient system services"
        user= sh "$sd_body"
        return
    fi
    command -v unshare >/dev/null && unshare --mount --propagation private true 2>/dev/null ||
        { echo "skipped: PID 1 is not systemd and no mount namespace can be made"; return 77; }
    sd_manager=
    for m in /lib/systemd/systemd /usr/lib/systemd/systemd; do
        [ -x "$m" ] && sd_manager=$m && break
    done
    [ -n "$sd_manager" ] || { echo "skipped: no systemd binary"; return 77; }
    echo "PID 1 is $(cat /proc/1/comm), not systemd: a manager of the test's own ($sd_manager --user, $(systemctl --version | head -1))"
    mkdir -p "$sd_dir/units"
    for t in sd-test basic default sockets timers paths shutdown; do
        printf '[Unit]\nDescription=%s\nDefaultDependencies=no\n' "$t" >"$sd_dir/units/$t.target"
    done
    printf '[Unit]\nDescription=exit\nDefaultDependencies=no\nSuccessAction=exit-force\n' \
        >"$sd_dir/units/exit.target"
    cat >"$sd_dir/sd-own.sh" <<EOF
set -eu
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system
export XDG_RUNTIME_DIR=${sd_runtime:-$sd_dir/xdg} SYSTEMD_UNIT_PATH=$sd_dir/units
mkdir -p -m 700 \$XDG_RUNTIME_DIR
$sd_manager --user --unit=sd-test.target >$sd_dir/manager.log 2>&1 &
echo \$! >$sd_dir/manager.pid
i=0
until [ -S \$XDG_RUNTIME_DIR/systemd/private ]; do
    i=\$((i + 1)); [ \$i -lt 200 ] || { echo "skipped: systemd --user does not start here:"; cat $sd_dir/manager.log; exit 77; }
    sleep 0.05
done
user=--user
. "$sd_body"
EOF
    sd_rc=0
    unshare --mount --propagation private sh "$sd_dir/sd-own.sh" || sd_rc=$?
    sd_mgr=$(cat "$sd_dir/manager.pid" 2>/dev/null || true)
    return $sd_rc
}
