#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Each release of releases.txt against the current tree, both ways (issue
# 26, item 2). The release is built once per build tree
# (build_releases.sh); then:
#  1. Its clients against the current vramd: its seed replay (its
#     vram-replay and test_seed_replay, both scenarios), its engine
#     contract (test_engine_contract, the host backend's), its example
#     engine (its examples/run_engine.sh), its vramctl. All pass, and
#     every hello the current vramd logs for them says protocol version 1;
#     the old vramctl's status lacks what version 2 added (schema).
#  2. The current clients (the same four) against its vramd. PROTOCOL.md
#     ("Versions") documents that they work at version 1: the old vramd
#     refuses their first hello ("protocol version mismatch: client 2,
#     server 1") and libvram says hello again at version 1. So all pass,
#     each hello the old vramd logs at debug follows such a refusal, and
#     the current vramctl's status says protocol_version 1.
#  3. The current clients against the current vramd, for comparison: every
#     hello at protocol version 2.
# vramd's log is what shows a connection's version: each vramd a test
# starts is a wrapper that keeps a hard link to its log (the tests remove
# their folders) and executes the real one, under the same pid.
#
# Usage: test_compat.sh SOURCE_DIR CACHE_DIR [CC], with the environment of
# tests/CMakeLists.txt: VRAMD_BIN, VRAMCTL_BIN, VRAM_REPLAY_BIN (current),
# VRAM_SEED_REPLAY_BIN, VRAM_CONTRACT_BIN, EXAMPLE_BIN (current tests).
set -u
src=$1
cache=$2
cc=${3:-cc}
name=test_compat pids=vramd keep_note="each run's output and vramd logs"
vramd=
. "$src/tests/lib/shtest.sh"
for v in VRAMD_BIN VRAMCTL_BIN VRAM_REPLAY_BIN VRAM_SEED_REPLAY_BIN \
         VRAM_CONTRACT_BIN EXAMPLE_BIN; do
    eval "[ -n \"\${$v:-}\" ]" || fail "$v is not set (tests/CMakeLists.txt sets it)"
done
new_vramd=$VRAMD_BIN
sh "$src/tests/compat/build_releases.sh" "$src" "$cache" "$cc" ||
    fail "the releases could not be built"

# The vramd every test below starts.
cat >"$tmp/vramd" <<'EOF'
#!/bin/sh
log=$(stat -L -c %i /proc/$$/fd/2)
# (No redirection on ln: the shell may make it before the fork, and ln
# would link the file it names instead.)
[ -e "$COMPAT_LOGS/$log.log" ] || ln -L "/proc/$$/fd/2" "$COMPAT_LOGS/$log.log" ||
    echo "cannot keep vramd's log $(readlink "/proc/$$/fd/2")" >>"$COMPAT_LOGS/errors"
exec "$COMPAT_VRAMD" "$@"
EOF
chmod +x "$tmp/vramd"
checks=0

# run LABEL VRAMD COMMAND...: runs the command with VRAMD_BIN the wrapper
# over VRAMD; its output in $tmp/LABEL.out, vramd's logs in $tmp/LABEL/.
run() {
    label=$1 daemon=$2
    shift 2
    logs=$tmp/$label
    mkdir -p "$logs"
    COMPAT_LOGS=$logs COMPAT_VRAMD=$daemon VRAMD_BIN=$tmp/vramd "$@" \
        >"$tmp/$label.out" 2>&1 ||
        fail "$label failed: $(tail -n 20 "$tmp/$label.out")"
    [ ! -s "$logs/errors" ] || fail "$label: $(cat "$logs/errors")"
    ls "$logs"/*.log >/dev/null 2>&1 || fail "$label: no vramd log was kept"
    checks=$((checks + 1))
}

# hellos LABEL: the "said hello" lines of its vramd logs.
hellos() {
    cat "$tmp/$1"/*.log | grep ' said hello as '
}

# at_version LABEL V: every hello of the current vramd's logs at version V.
at_version() {
    n=$(hellos "$1" | wc -l)
    [ "$n" -gt 0 ] || fail "$1: no hello in vramd's log"
    others=$(hellos "$1" | grep -v "protocol version $2\$")
    [ -z "$others" ] || fail "$1: hellos not at version $2: $others"
    checks=$((checks + 1))
}

# said_again LABEL [exact]: each hello the old vramd took followed its
# refusal of version 2 (exact: one refusal per hello, as logged at debug;
# else at least one: at info refusals are logged one per 10 s).
said_again() {
    n=$(hellos "$1" | wc -l)
    refused=$(cat "$tmp/$1"/*.log | grep -c 'refused: EPROTONOSUPPORT: protocol version mismatch: client 2, server 1$')
    [ "$n" -gt 0 ] || fail "$1: no hello in the old vramd's log"
    others=$(cat "$tmp/$1"/*.log | grep 'refused: EPROTONOSUPPORT' |
             grep -v 'protocol version mismatch: client 2, server 1$')
    [ -z "$others" ] || fail "$1: other refusals: $others"
    if [ "${2:-}" = exact ]; then
        [ "$refused" -eq "$n" ] ||
            fail "$1: $n hellos taken, $refused refused at version 2 first"
    else
        [ "$refused" -ge 1 ] || fail "$1: no hello was refused at version 2 first"
    fi
    checks=$((checks + 1))
}

# status_json LABEL VRAMD VRAMCTL: VRAMCTL's status --json of VRAMD, in
# $tmp/LABEL.json.
status_json() {
    logs=$tmp/$1
    mkdir -p "$logs"
    rm -f "$sock"
    COMPAT_LOGS=$logs COMPAT_VRAMD=$2 "$tmp/vramd" --backend host \
        --socket "$sock" --log-level debug 2>"$logs/vramd.err" &
    vramd=$!
    i=0
    until "$3" --socket "$sock" status --json >"$tmp/$1.json" 2>"$tmp/$1.err"; do
        i=$((i + 1))
        [ $i -lt 200 ] || fail "$1: no status: $(cat "$tmp/$1.err")"
        sleep 0.05
    done
    kill "$vramd"
    wait "$vramd"
    vramd=
    checks=$((checks + 1))
}

grep -v '^[[:space:]]*\(#\|$\)' "$src/tests/compat/releases.txt" >"$tmp/releases"
while read -r version commit; do
    old=$cache/$version/build
    old_src=$cache/$version/src
    echo "$name: release $version ($commit)"

    # 1. Its clients, the current vramd.
    for s in seed-pp32-16.json seed-pp32-16-1gpu.json; do
        run "$version-old-replay-$s" "$new_vramd" env VRAM_REPLAY_BIN="$old/vram-replay" \
            VRAM_SOURCE_DIR="$old_src" "$old/tests/test_seed_replay" "$s"
        at_version "$version-old-replay-$s" 1
    done
    run "$version-old-contract" "$new_vramd" "$old/tests/test_engine_contract"
    at_version "$version-old-contract" 1
    run "$version-old-example" "$new_vramd" env EXAMPLE_BIN="$old/vram-example-engine" \
        sh "$old_src/examples/run_engine.sh"
    at_version "$version-old-example" 1
    status_json "$version-old-vramctl" "$new_vramd" "$old/vramctl"
    at_version "$version-old-vramctl" 1
    grep -q '"protocol_version":[[:space:]]*2,' "$tmp/$version-old-vramctl.json" ||
        fail "$version's vramctl: the current vramd's status lacks protocol_version 2"
    ! grep -q '"schema"' "$tmp/$version-old-vramctl.json" ||
        fail "$version's vramctl got status.schema, a field of version 2, on a connection of version 1"

    # 2. The current clients, its vramd.
    for s in seed-pp32-16.json seed-pp32-16-1gpu.json; do
        run "$version-new-replay-$s" "$old/vramd" "$VRAM_SEED_REPLAY_BIN" "$s"
        said_again "$version-new-replay-$s" exact
    done
    run "$version-new-contract" "$old/vramd" "$VRAM_CONTRACT_BIN"
    said_again "$version-new-contract" exact
    run "$version-new-example" "$old/vramd" sh "$src/examples/run_engine.sh"
    said_again "$version-new-example"
    status_json "$version-new-vramctl" "$old/vramd" "$VRAMCTL_BIN"
    said_again "$version-new-vramctl" exact
    grep -q '"protocol_version":[[:space:]]*1,' "$tmp/$version-new-vramctl.json" ||
        fail "the current vramctl: $version's status does not say protocol_version 1"
done <"$tmp/releases"

# 3. The current clients, the current vramd.
run new-contract "$new_vramd" "$VRAM_CONTRACT_BIN"
at_version new-contract 2
run new-example "$new_vramd" sh "$src/examples/run_engine.sh"
at_version new-example 2
status_json new-vramctl "$new_vramd" "$VRAMCTL_BIN"
at_version new-vramctl 2
grep -q '"schema"' "$tmp/new-vramctl.json" ||
    fail "the current vramctl's status of the current vramd lacks schema"

passed=1
echo "$name: $checks checks, 0 failed"
