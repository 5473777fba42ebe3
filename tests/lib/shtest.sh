# SPDX-License-Identifier: Apache-2.0
# What the shell tests share; sourced after setting
#   name       the test's name, for its messages ("metrics_http")
#   build src  the build and source folders (the test's arguments)
#   pids       the names of the variables that hold its background
#              processes' pids ("exporter replay vramd"), killed at exit
#   keep_note  (optional) what the kept folder holds, for the message
#   on_exit    (optional) a command run first at exit (tmux kill-server)
#   tmp_prefix (optional) the folder's name instead of $name (paths that
#              must fit on a screen line)
# It makes $tmp, a fresh folder (removed when the test passes, kept and
# named when it fails) with $sock in it, and defines fail and start_vramd.
# The test says `passed=1` at its end.
tmp=$(mktemp -d "/tmp/vram-${tmp_prefix:-$name}-XXXXXX")
sock=$tmp/s
passed=0
shtest_cleanup() {
    [ -n "${on_exit:-}" ] && eval "$on_exit" 2>/dev/null
    for v in $pids; do
        eval "p=\${$v:-}"
        [ -n "$p" ] && kill "$p" 2>/dev/null
    done
    wait 2>/dev/null
    if [ $passed = 1 ]; then
        rm -rf "$tmp"
    else
        echo "$name: kept $tmp${keep_note:+ ($keep_note)}"
    fi
}
trap shtest_cleanup EXIT
fail() {
    echo "$name: $*"
    echo "$name: 0 passed, 1 failed"
    exit 1
}
# vramd on $sock (with $config when set), its pid in $vramd, once it answers.
start_vramd() {
    "$build/vramd" --backend host --socket "$sock" ${config:+--config "$config"} \
        2>>"$tmp/vramd.log" &
    vramd=$!
    i=0
    until "$build/vramctl" --socket "$sock" status >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 200 ] || fail "vramd did not start: $(tail -5 "$tmp/vramd.log")"
        sleep 0.05
    done
}
