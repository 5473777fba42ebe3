#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramctl top on a real terminal: tmux (a detached session of fixed size)
# runs it against the real vramd while the seed replay holds memory, and
# its screen is read back with capture-pane. Checked: the alternate screen
# is on and the cursor hidden while it runs; each device's bar has the
# cells its figures give (fixed, KV, loaned, free) and its legend the
# figures; each stage its KV against its window and its expert residency;
# each engine client what it holds; a change (set-capacity) shows at the
# next refresh; a resize redraws to the new width. The keys: h and ? show
# the help (a key, Escape too, closes it), s and S sort the clients, d sets
# the delay at a prompt (a bad one refused, Escape cancels), p pauses (a
# change does not show until p again), the arrows, j/k, PgUp/PgDn and
# Home/End scroll a short window (which says which lines it shows), Left
# and Right scroll a narrow one sideways, no further than its widest line.
# vramd going away puts "vramd not answering since HH:MM:SS" over the last
# figures, which stay, and coming back takes it away. Then q,
# ^C (a byte in raw mode) and SIGTERM each end it with status 0, the
# primary screen and the cursor back and the terminal's modes (stty -g) as
# before, the shell's prompt showing. Without a terminal it prints one
# plain frame. The temporary folder is removed when the test passes, kept
# (and named) when it fails. Usage: test_top.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
src=$2
# The header names the running vramd's version: this tree's.
version=$(sed -n 's/^project(vramd VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
command -v tmux >/dev/null ||
    { echo "vramctl_top: tmux is needed (sh scripts/deps.sh --test)"; exit 1; }
name=vramctl_top pids="replay vramd" keep_note="screen.*: the captures, vramd.log"
tmp_prefix=top
on_exit='$tm kill-server'
vramd= replay=
. "$src/tests/lib/shtest.sh"
config=$src/tests/scenarios/seed-pp32-16.json
tm="tmux -S $tmp/tmux -f /dev/null"

# capture NAME: the pane's text now, in $tmp/screen.NAME.
capture() {
    $tm capture-pane -p -t top >"$tmp/screen.$1"
}
# wait_screen NAME PATTERN: until the pane shows PATTERN (grep -E).
wait_screen() {
    i=0
    while :; do
        capture "$1"
        grep -Eq -- "$2" "$tmp/screen.$1" && return 0
        i=$((i + 1))
        [ $i -lt 200 ] || fail "the screen never showed '$2':
$(cat "$tmp/screen.$1")"
        sleep 0.05
    done
}
# wait_gone NAME PATTERN: until the pane no longer shows PATTERN.
wait_gone() {
    i=0
    while :; do
        capture "$1"
        grep -Eq -- "$2" "$tmp/screen.$1" || return 0
        i=$((i + 1))
        [ $i -lt 200 ] || fail "the screen kept showing '$2':
$(cat "$tmp/screen.$1")"
        sleep 0.05
    done
}
flags() {
    $tm display -p -t top '#{alternate_on} #{cursor_flag}'
}
# count CHAR LINE: how many times CHAR is in LINE.
count() {
    printf '%s' "$2" | tr -cd "$1" | wc -c | tr -d ' '
}

start_vramd
: >"$tmp/replay" # the loop below may look before the job opens it
"$build/vram-replay" --socket "$sock" --hold "$config" >"$tmp/replay" 2>&1 &
replay=$!
i=0
until grep -q holding "$tmp/replay"; do
    i=$((i + 1)); [ $i -lt 200 ] || fail "the replay did not finish"
    sleep 0.05
done

# A shell of its own, in a 120x40 terminal, whose prompt says it is back.
$tm new-session -d -s top -x 120 -y 40 \
    "env -i PATH=/usr/bin:/bin HOME=$tmp TERM=xterm-256color PS1='top-test\$ ' sh" ||
    fail "tmux did not start"
wait_screen prompt '^top-test\$'
# run KEYS...: starts vramctl top in the pane, its status going to $tmp/rc.
run_top() {
    rm -f "$tmp/rc"
    $tm send-keys -t top "clear; stty -g >$tmp/stty.before; $build/vramctl --socket $sock top --interval 200; echo \$? >$tmp/rc; stty -g >$tmp/stty.after" Enter
    wait_screen "$1" 'STAGE 1 '
}
# ended NAME: vramctl exited 0, and the terminal is as it was.
ended() {
    i=0
    until [ -s "$tmp/rc" ] && [ -s "$tmp/stty.after" ]; do
        i=$((i + 1)); [ $i -lt 100 ] || fail "$1: vramctl top did not end"
        sleep 0.05
    done
    [ "$(cat "$tmp/rc")" = 0 ] || fail "$1: exit status $(cat "$tmp/rc")"
    cmp -s "$tmp/stty.before" "$tmp/stty.after" ||
        fail "$1: the terminal's modes changed: $(cat "$tmp/stty.before") -> $(cat "$tmp/stty.after")"
    wait_screen "$1.after" '^top-test\$ *$'
    [ "$(flags)" = "0 1" ] || fail "$1: alternate screen and cursor flags after: $(flags)"
    grep -q 'STAGE 1 ' "$tmp/screen.$1.after" && fail "$1: the frame stayed on the primary screen"
    return 0
}

# 1. The view. A frame reaches the pane in more than one piece (the pty
# hands tmux part of it at a time): it is read once its last rows, both
# engines' with their bars, are there.
run_top live
i=0
until [ "$(grep -Ec '^[0-9]+ +replay-stage-[01] .*\]$' "$tmp/screen.live")" = 2 ]; do
    i=$((i + 1))
    [ $i -lt 200 ] || fail "the frame never showed both engines' rows:
$(cat "$tmp/screen.live")"
    sleep 0.05
    capture live
done
[ "$(flags)" = "1 0" ] || fail "while running: alternate screen and cursor flags $(flags)"
s=$tmp/screen.live
grep -q "^vramctl top  vramd $version (host) on .*, every 200 ms; h help, q quits\$" "$s" ||
    fail "no header: $(head -1 "$s")"
grep -q '^DEVICE 0  host memory pool 0  capacity 16 GiB in 2 MiB chunks$' "$s" ||
    fail "no device 0 line"
# Device bars: 115 cells at 120 columns (one column is left free, two
# indent, two brackets), in proportion to the figures: device 0 has 160
# MiB of KV (1.1 cells), 1952 MiB of loans (13.7) and the rest free.
bar0=$(grep -A1 '^DEVICE 0 ' "$s" | sed -n 2p)
bar1=$(grep -A1 '^DEVICE 1 ' "$s" | sed -n 2p)
printf '%s\n' "$bar0" | grep -Eq '^  \[=+\++\.+\]$' || fail "device 0's bar: '$bar0'"
[ ${#bar0} = 119 ] || fail "device 0's bar is ${#bar0} columns, not 119"
[ "$(count = "$bar0") $(count + "$bar0") $(count . "$bar0")" = "1 14 100" ] ||
    fail "device 0's bar cells (KV loaned free): $(count = "$bar0") $(count + "$bar0") $(count . "$bar0")"
# Device 1: 100 MiB of KV (0.7 cells: shown as one), 1220 MiB of loans.
[ "$(count = "$bar1") $(count + "$bar1") $(count . "$bar1")" = "1 8 106" ] ||
    fail "device 1's bar cells: $(count = "$bar1") $(count + "$bar1") $(count . "$bar1")"
grep -q '^  # fixed 0 B  = KV 160 MiB  + loaned 1.91 GiB  ! recalling 0 B  x quarantined 0 B  . free 13.94 GiB$' "$s" ||
    fail "device 0's legend"
grep -q '^  # fixed 0 B  = KV 100 MiB  + loaned 1.19 GiB  ! recalling 0 B  x quarantined 0 B  . free 14.71 GiB$' "$s" ||
    fail "device 1's legend"
# Stages: KV against the window, expert residency.
grep -Eq '^STAGE 0  device 0  layers 0-31  owner client [0-9]+ \(replay-stage-0\)$' "$s" ||
    fail "no stage 0 line"
grep -Eq '^  KV      \[-+\.+\]  160 MiB/2.06 GiB mapped, needs 0 B$' "$s" || fail "stage 0's KV"
grep -Eq '^  experts \[\++\.+\]  1301/10922 slots, 1.91 GiB loaned, 0 recalling$' "$s" ||
    fail "stage 0's experts"
grep -Eq '^  KV      \[-+\.+\]  100 MiB/1.29 GiB mapped, needs 0 B$' "$s" || fail "stage 1's KV"
grep -Eq '^  experts \[\++\.+\]  813/10922 slots, 1.19 GiB loaned, 0 recalling$' "$s" ||
    fail "stage 1's experts"
# Clients: what each engine holds; vramctl itself is not listed.
grep -Eq '^[0-9]+ +replay-stage-0 +[0-9]+ +connected +2.06 GiB +0 B +0 +\[\|+\.+\]$' "$s" ||
    fail "client replay-stage-0's row"
grep -Eq '^[0-9]+ +replay-stage-1 +[0-9]+ +connected +1.29 GiB +0 B +1 +\[\|+\.+\]$' "$s" ||
    fail "client replay-stage-1's row"
grep -v '^vramctl top' "$s" | grep -q 'vramctl' && fail "a control client is listed"
awk 'length > 119 { bad = 1 } END { exit bad }' "$s" || fail "a line wider than 119 columns"

# key KEY...: sends them to the pane.
key() {
    $tm send-keys -t top "$@"
}
# line_of PATTERN NAME: the number of the first line of screen NAME that
# matches PATTERN (grep -E), or nothing.
line_of() {
    grep -En -- "$1" "$tmp/screen.$2" | head -1 | cut -d: -f1
}

# 2. Refreshed in place: a new capacity shows at the next refresh; not
# while paused (p), at once when resumed.
"$build/vramctl" --socket "$sock" set-capacity 0 12GiB >/dev/null || fail "set-capacity"
wait_screen refresh '^DEVICE 0  host memory pool 0  capacity 12 GiB in 2 MiB chunks$'
key p
wait_screen paused ', paused \(p resumes\); h help, q quits$'
"$build/vramctl" --socket "$sock" set-capacity 0 16GiB >/dev/null || fail "set-capacity back"
sleep 1 # five refreshes
capture paused2
grep -q '^DEVICE 0  host memory pool 0  capacity 12 GiB' "$tmp/screen.paused2" ||
    fail "the view refreshed while paused"
key p
wait_screen resumed '^DEVICE 0  host memory pool 0  capacity 16 GiB in 2 MiB chunks$'
grep -q ', every 200 ms; h help, q quits$' "$tmp/screen.resumed" || fail "still paused"

# 3. The help: h or ?; any key closes it, Escape too (alone, no sequence).
key '?'
wait_screen help '^Keys$'
for k in '  h or \?  ' '  s  ' '  S  ' '  d  ' '  p  ' '  Up Down, j k  ' '  PgUp PgDn  ' \
    '  Home End  ' '  Left Right  ' '  q or \^C  '; do
    grep -Eq -- "^$k" "$tmp/screen.help" || fail "the help lacks '$k'"
done
grep -q 'STAGE 1 ' "$tmp/screen.help" && fail "the figures under the help"
key x
wait_gone help.closed '^Keys$'
grep -q 'STAGE 1 ' "$tmp/screen.help.closed" || fail "no figures after the help"
key h
wait_screen help2 '^Keys$'
key Escape
wait_gone help2.closed '^Keys$'

# 4. Sorting the clients: by held (most first), s to the next column (held,
# quarantined, name, ...), S reverses.
capture sort.held
grep -q '^clients by held, most first (s: another column, S: reverse)$' "$tmp/screen.sort.held" ||
    fail "the clients' order is not said"
key s
wait_screen sort.q '^clients by quarantined, most first'
key s
wait_screen sort.name '^clients by name \('
a=$(line_of ' replay-stage-0 ' sort.name) b=$(line_of ' replay-stage-1 ' sort.name)
[ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] || fail "by name: stage-0 at $a, stage-1 at $b"
key S
wait_screen sort.rev '^clients by name, reversed'
a=$(line_of ' replay-stage-0 ' sort.rev) b=$(line_of ' replay-stage-1 ' sort.rev)
[ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt "$b" ] || fail "reversed: stage-0 at $a, stage-1 at $b"
key s s s s
wait_screen sort.back '^clients by held, most first'

# 5. The delay: d, digits, Enter; a bad one refused; Escape cancels.
key d
wait_screen delay '^delay in ms \(now 200; Enter sets it, Esc cancels\): _$'
key 5 0 0
wait_screen delay.typed '\): 500_$'
key Enter
wait_screen delay.set ', every 500 ms; h help, q quits$'
grep -q '^refreshing every 500 ms$' "$tmp/screen.delay.set" || fail "the new delay is not said"
key d 0 Enter
wait_screen delay.bad "^delay '0': milliseconds, 1 to 3600000; unchanged$"
grep -q ', every 500 ms;' "$tmp/screen.delay.bad" || fail "a bad delay changed it"
key d 9 Escape
wait_gone delay.esc '^delay in ms'
grep -q ', every 500 ms;' "$tmp/screen.delay.esc" || fail "Escape changed the delay"
key d 2 0 0 Enter
wait_screen delay.back ', every 200 ms; h help, q quits$'
"$build/vramctl" --socket "$sock" set-capacity 0 12GiB >/dev/null || fail "set-capacity"
wait_screen delay.live '^DEVICE 0  host memory pool 0  capacity 12 GiB'
"$build/vramctl" --socket "$sock" set-capacity 0 16GiB >/dev/null || fail "set-capacity back"
wait_screen delay.live2 '^DEVICE 0  host memory pool 0  capacity 16 GiB'

# 6. A resize redraws to the new width; a short window says which lines it
# shows, and scrolls.
$tm resize-window -t top -x 80 -y 40
wait_screen narrow '^  \[=\+{1,20}\.{50,}\]$'
# The frame drawn at the old width may still be arriving when the new one
# shows (tmux wraps it at 80, leaving lines of exactly 80): the settled
# screen, within 10 s, has none wider than 79.
i=0
while ! awk 'length > 79 { bad = 1 } END { exit bad }' "$tmp/screen.narrow"; do
    i=$((i + 1))
    [ $i -lt 200 ] || fail "a line wider than 79 columns at 80:
$(awk 'length > 79' "$tmp/screen.narrow")"
    sleep 0.05
    capture narrow
done
bar=$(grep -A1 '^DEVICE 0 ' "$tmp/screen.narrow" | sed -n 2p)
[ ${#bar} = 79 ] || fail "at 80 columns device 0's bar is ${#bar} columns: '$bar'"
# Sideways at 60 columns: Right by 8, no further than the widest line
# (the clients' header) shows its end; the header stays; Left comes back.
$tm resize-window -t top -x 60 -y 40
wait_screen side '^  ! recalling 0 B  x quarantined 0 B  \. free 13\.94 GiB$' # redrawn at 60
key Right
wait_screen side.r '^  host memory pool 0  capacity 16 GiB'
grep -q '^vramctl top  vramd' "$tmp/screen.side.r" || fail "the header scrolled sideways"
key Right Right Right Right Right
wait_screen side.end '^ +PID +STATE +HELD +QUARANTINED STAGES$'
key Right
sleep 0.3
capture side.end2
grep -Eq '^ +PID +STATE +HELD +QUARANTINED STAGES$' "$tmp/screen.side.end2" ||
    fail "scrolled past the widest line"
key Left Left Left Left Left Left Left
wait_screen side.back '^CLIENT NAME'
$tm resize-window -t top -x 120 -y 12
wait_screen short '^\(lines 1-9 of [0-9]+: Up, Down, PgUp, PgDn scroll; h help\)$'
[ "$(grep -c . "$tmp/screen.short")" -le 12 ] || fail "more lines than the window has"
n=$(sed -n 's/^(lines 1-9 of \([0-9]*\):.*/\1/p' "$tmp/screen.short")
sed -n 3p "$tmp/screen.short" | grep -q '^DEVICE 0 ' || fail "the figures do not begin at line 3"
key Down
wait_screen down '^\(lines 2-10 of '
sed -n 3p "$tmp/screen.down" | grep -q '^  \[' || fail "Down: line 3 is not device 0's bar"
key j j k
wait_screen jk '^\(lines 3-11 of '
key PageDown
wait_screen pgdn '^\(lines 11-19 of '
key End
wait_screen end "^\\(lines $((n - 8))-$n of $n:"
grep -Eq '^[0-9]+ +replay-stage-1 ' "$tmp/screen.end" || fail "End: the last client is not shown"
key Down
sleep 0.3
capture end2
grep -q "^(lines $((n - 8))-$n of $n:" "$tmp/screen.end2" || fail "Down scrolled past the end"
key PageUp
wait_screen pgup "^\\(lines $((n - 16))-$((n - 8)) of "
key Home
wait_screen home '^\(lines 1-9 of '
$tm resize-window -t top -x 120 -y 40
wait_gone tall '^\(lines '

# 7. vramd goes away and comes back: a banner over the last figures, which
# stay; the time it names stays that of the first failure; gone once vramd
# answers.
kill -9 "$vramd"; wait "$vramd" 2>/dev/null; vramd=
wait_screen gone "no vramd at $sock \\(is it running\\? VRAM_SOCKET.*trying again every 200 ms"
banner=$(grep -E '^ vramd not answering since [0-9]{2}:[0-9]{2}:[0-9]{2}   the figures below are from [0-9]{2}:[0-9]{2}:[0-9]{2}$' "$tmp/screen.gone")
[ -n "$banner" ] || fail "no banner: $(sed -n 2p "$tmp/screen.gone")"
[ "$(line_of '^ vramd not answering' gone)" = 2 ] || fail "the banner is not under the header"
grep -q '^DEVICE 0  host memory pool 0  capacity 16 GiB' "$tmp/screen.gone" &&
    grep -Eq '^[0-9]+ +replay-stage-1 ' "$tmp/screen.gone" || fail "the last figures went"
sleep 1.2
capture gone2
grep -qF -- "$banner" "$tmp/screen.gone2" || fail "the banner's time moved: $(sed -n 2p "$tmp/screen.gone2")"
start_vramd
wait_gone back 'not answering|trying again'
grep -q '^DEVICE 0  host memory pool 0  capacity 16 GiB' "$tmp/screen.back" ||
    fail "no figures after vramd came back"

# 8. q ends it, the terminal restored.
$tm send-keys -t top q
ended q

# 9. ^C (a byte in raw mode, not a signal).
run_top ctrlc
$tm send-keys -t top C-c
ended ctrlc

# 10. SIGTERM from elsewhere.
run_top term
pid=$(pgrep -f "vramctl --socket $sock top" | head -1)
[ -n "$pid" ] || fail "no vramctl top process"
kill -TERM "$pid"
ended sigterm

# 11. Not a terminal: one plain frame, at 80 columns.
"$build/vramctl" --socket "$sock" top >"$tmp/frame.txt" 2>"$tmp/frame.err" </dev/null
[ $? = 0 ] || fail "vramctl top to a file: $(cat "$tmp/frame.err")"
grep -q '^DEVICE 1  host memory pool 1' "$tmp/frame.txt" || fail "the plain frame: $(cat "$tmp/frame.txt")"
if LC_ALL=C grep -q "$(printf '\033')" "$tmp/frame.txt"; then fail "escapes in the plain frame"; fi
awk 'length > 79 { bad = 1 } END { exit bad }' "$tmp/frame.txt" || fail "the plain frame is wider than 79"
grep -Eq 'q quits|clients by' "$tmp/frame.txt" && fail "the plain frame tells of keys"
"$build/vramctl" --socket "$sock" top --count 2 >/dev/null 2>&1
[ $? = 2 ] || fail "top --count is not an option of top"

passed=1
echo "vramctl_top: 1 passed, 0 failed"
