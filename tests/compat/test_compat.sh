#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Each release of releases.txt against the current tree, both ways (issue
# 26, item 2). The release is built once per build tree
# (build_releases.sh); then:
#  1. Its clients against the current vramd: its seed replay (its
#     vram-replay and test_seed_replay, both scenarios), its engine
#     contract (test_engine_contract, the host backend's), its example
#     engine (its examples/run_engine.sh), its vramctl. All pass, and
#     every hello the current vramd logs for them is at the release's
#     protocol version (the newest both speak: its messages.json's
#     protocol_version); before version 2, the old vramctl's status lacks
#     what version 2 added (schema).
#  2. The current clients (the same four) against its vramd: all pass at
#     the release's version. A vramd of version 1 (0.1.0) does not
#     negotiate; PROTOCOL.md ("Versions") documents that the current
#     clients work with it all the same: it refuses their first hello
#     ("protocol version mismatch: client 2, server 1") and libvram says
#     hello again at version 1. So each hello it logs at debug follows
#     such a refusal. A later vramd logs the version it agreed on. The
#     current vramctl's status says the release's protocol_version.
#  3. The current clients against the current vramd, for comparison: every
#     hello at the current version.
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
    if ! COMPAT_LOGS=$logs COMPAT_VRAMD=$daemon VRAMD_BIN=$tmp/vramd "$@" \
            >"$tmp/$label.out" 2>&1; then
        # What vramd said last, when it refused or failed.
        said=$(cat "$logs"/*.log 2>/dev/null | grep -E ' refused: | (error|crit): ' | tail -n 3)
        [ -z "$said" ] || said="
the last refusals and errors in the vramd log:
$said"
        fail "$label failed: $(tail -n 20 "$tmp/$label.out")$said"
    fi
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

# agreed LABEL [exact]: the current clients' hellos with the old vramd,
# at $old_proto. A vramd of version 1 logs no version: each hello it took
# followed its refusal of the current version (exact: one refusal per
# hello, as logged at debug; else at least one: at info refusals are
# logged one per 10 s), and no other refusal of a hello.
agreed() {
    if [ "$old_proto" -gt 1 ]; then
        at_version "$1" "$old_proto"
        return
    fi
    mismatch="protocol version mismatch: client $new_proto, server 1\$"
    n=$(hellos "$1" | wc -l)
    refused=$(cat "$tmp/$1"/*.log | grep -c "refused: EPROTONOSUPPORT: $mismatch")
    [ "$n" -gt 0 ] || fail "$1: no hello in the old vramd's log"
    others=$(cat "$tmp/$1"/*.log | grep 'refused: EPROTONOSUPPORT' |
             grep -v "$mismatch")
    [ -z "$others" ] || fail "$1: other refusals: $others"
    if [ "${2:-}" = exact ]; then
        [ "$refused" -eq "$n" ] ||
            fail "$1: $n hellos taken, $refused refused at version $new_proto first"
    else
        [ "$refused" -ge 1 ] || fail "$1: no hello was refused at version $new_proto first"
    fi
    checks=$((checks + 1))
}

# status_json LABEL VRAMD VRAMCTL: VRAMCTL's status --json of VRAMD, in
# $tmp/LABEL.json. Each VRAMD in a folder of its own: the state file one
# leaves beside its socket is not another's (a release may not read the
# current format).
status_json() {
    logs=$tmp/$1
    mkdir -p "$logs"
    mkdir -m 700 "$tmp/$1.run" || fail "cannot make $tmp/$1.run"
    s=$tmp/$1.run/s
    COMPAT_LOGS=$logs COMPAT_VRAMD=$2 "$tmp/vramd" --backend host \
        --socket "$s" --log-level debug 2>"$logs/vramd.err" &
    vramd=$!
    i=0
    until "$3" --socket "$s" status --json >"$tmp/$1.json" 2>"$tmp/$1.err"; do
        i=$((i + 1))
        kill -0 "$vramd" 2>/dev/null ||
            fail "$1: vramd exited: $(tail -n 3 "$logs/vramd.err")"
        [ $i -lt 200 ] || fail "$1: no status: $(cat "$tmp/$1.err")"
        sleep 0.05
    done
    kill "$vramd"
    wait "$vramd"
    vramd=
    checks=$((checks + 1))
}

# proto_of DIR: the newest protocol version of the tree at DIR.
proto_of() {
    sed -n 's/^ *"protocol_version": *\([0-9]*\),.*/\1/p' "$1/proto/messages.json" |
        head -n 1
}
new_proto=$(proto_of "$src")
[ -n "$new_proto" ] || fail "no protocol_version in $src/proto/messages.json"

grep -v '^[[:space:]]*\(#\|$\)' "$src/tests/compat/releases.txt" >"$tmp/releases"
while read -r version commit; do
    old=$cache/$version/build
    old_src=$cache/$version/src
    old_proto=$(proto_of "$old_src")
    [ -n "$old_proto" ] || fail "no protocol_version in $version's messages.json"
    echo "$name: release $version ($commit), protocol $old_proto"

    # 1. Its clients, the current vramd.
    for s in seed-pp32-16.json seed-pp32-16-1gpu.json; do
        run "$version-old-replay-$s" "$new_vramd" env VRAM_REPLAY_BIN="$old/vram-replay" \
            VRAM_SOURCE_DIR="$old_src" "$old/tests/test_seed_replay" "$s"
        at_version "$version-old-replay-$s" "$old_proto"
    done
    run "$version-old-contract" "$new_vramd" "$old/tests/test_engine_contract"
    at_version "$version-old-contract" "$old_proto"
    run "$version-old-example" "$new_vramd" env EXAMPLE_BIN="$old/vram-example-engine" \
        sh "$old_src/examples/run_engine.sh"
    at_version "$version-old-example" "$old_proto"
    status_json "$version-old-vramctl" "$new_vramd" "$old/vramctl"
    at_version "$version-old-vramctl" "$old_proto"
    grep -q "\"protocol_version\":[[:space:]]*$new_proto," "$tmp/$version-old-vramctl.json" ||
        fail "$version's vramctl: the current vramd's status lacks protocol_version $new_proto"
    if [ "$old_proto" -lt 2 ] && grep -q '"schema"' "$tmp/$version-old-vramctl.json"; then
        fail "$version's vramctl got status.schema, a field of version 2, on a connection of version $old_proto"
    fi

    # 2. The current clients, its vramd.
    for s in seed-pp32-16.json seed-pp32-16-1gpu.json; do
        run "$version-new-replay-$s" "$old/vramd" "$VRAM_SEED_REPLAY_BIN" "$s"
        agreed "$version-new-replay-$s" exact
    done
    run "$version-new-contract" "$old/vramd" "$VRAM_CONTRACT_BIN"
    agreed "$version-new-contract" exact
    run "$version-new-example" "$old/vramd" sh "$src/examples/run_engine.sh"
    agreed "$version-new-example"
    status_json "$version-new-vramctl" "$old/vramd" "$VRAMCTL_BIN"
    agreed "$version-new-vramctl" exact
    grep -q "\"protocol_version\":[[:space:]]*$old_proto," "$tmp/$version-new-vramctl.json" ||
        fail "the current vramctl: $version's status does not say protocol_version $old_proto"
done <"$tmp/releases"

# 3. The current clients, the current vramd.
run new-contract "$new_vramd" "$VRAM_CONTRACT_BIN"
at_version new-contract "$new_proto"
run new-example "$new_vramd" sh "$src/examples/run_engine.sh"
at_version new-example "$new_proto"
status_json new-vramctl "$new_vramd" "$VRAMCTL_BIN"
at_version new-vramctl "$new_proto"
grep -q '"schema"' "$tmp/new-vramctl.json" ||
    fail "the current vramctl's status of the current vramd lacks schema"

passed=1
echo "$name: $checks checks, 0 failed"
