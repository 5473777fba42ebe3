#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a temporary prefix, runs what was installed there
# (the tools find the installed libvram through their RPATH; vramd checks a
# configuration and serves the installed vramctl; the installed unit starts
# the installed vramd), and builds a small engine against the installed
# libvram with pkg-config and with find_package(vram), shared and static.
# The temporary folder is removed when the test passes, kept when it fails.
# Usage: test_install.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d /tmp/vram-install-XXXXXX)
fail=0
vramd_pid=
cleanup() {
    rc=$?
    [ $rc -eq 0 ] || fail=1
    if [ -n "$vramd_pid" ]; then
        kill "$vramd_pid" 2>/dev/null || true
        wait "$vramd_pid" 2>/dev/null || true
    fi
    if [ "$fail" -eq 0 ]; then
        rm -rf "$tmp"
    else
        echo "kept for a look: $tmp"
    fi
}
trap cleanup EXIT
# Nothing from the build tree or the caller's environment may help the
# installed binaries find their library.
unset LD_LIBRARY_PATH VRAM_SOCKET
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
p=$tmp/prefix
for f in bin/vramd bin/vramctl bin/vram-replay include/vram.h libexec/vramd/vramd-holder \
         lib/systemd/system/vramd.service lib/systemd/system/vramd.socket \
         lib/sysusers.d/vramd.conf lib/tmpfiles.d/vramd.conf \
         share/man/man8/vramd.8 share/man/man1/vramctl.1; do
    [ -e "$p/$f" ] || { echo "not installed: $f"; fail=1; }
done
lib=$(dirname "$(find "$p" -name 'libvram.so' | head -n 1)")
[ -n "$lib" ] && [ -e "$lib/libvram.a" ] && [ -e "$lib/pkgconfig/vram.pc" ] &&
    [ -e "$lib/cmake/vram/vramConfig.cmake" ] || { echo "libraries, vram.pc or the CMake package missing"; fail=1; exit 1; }

# The installed tools run: they find libvram through an RPATH relative to
# where they lie, never the build tree's.
for t in vramctl vram-replay; do
    if ! out=$("$p/bin/$t" --version 2>&1); then
        echo "installed $t --version failed: $out"; fail=1
    fi
    case $out in "$t "[0-9]*) ;; *) echo "installed $t --version: $out"; fail=1 ;; esac
    so=$(ldd "$p/bin/$t" | awk '$1 ~ /^libvram\.so/ { print $3 }')
    case $so in
    "$p"/*) ;;
    not|"") echo "installed $t does not find libvram"; fail=1 ;;
    *) echo "installed $t loads libvram from '$so', not from $p"; fail=1 ;;
    esac
    readelf -d "$p/bin/$t" | grep -Eq '(RPATH|RUNPATH).*\$ORIGIN/\.\./' ||
        { echo "installed $t has no \$ORIGIN-relative RPATH"; fail=1; }
done

# The installed vramd checks a small configuration (and refuses a bad one).
cat >"$tmp/vramd.json" <<'J'
{"devices": [{"id": 0, "capacity": "64MiB"}], "pool": {"prefill_chunks": 2}}
J
if ! out=$("$p/bin/vramd" --check-config "$tmp/vramd.json" 2>&1) ||
    ! echo "$out" | grep -q 'valid (1 devices'; then
    echo "installed vramd --check-config: $out"; fail=1
fi
echo '{"devices": [{"id": 0, "capacity": "64 parsecs"}]}' >"$tmp/bad.json"
if out=$("$p/bin/vramd" --check-config "$tmp/bad.json" 2>&1); then
    echo "installed vramd accepted a bad configuration: $out"; fail=1
fi

# A short session: the installed vramd on a temporary socket serves the
# installed vramctl, and stops cleanly on SIGTERM.
mkdir -m 0755 "$tmp/run"
sock=$tmp/run/vramd.sock
"$p/bin/vramd" --socket "$sock" --backend host --config "$tmp/vramd.json" \
    --log-level info >"$tmp/vramd.log" 2>&1 &
vramd_pid=$!
i=0
until "$p/bin/vramctl" --socket "$sock" status >"$tmp/status.out" 2>"$tmp/status.err"; do
    i=$((i + 1))
    if [ $i -ge 200 ] || ! kill -0 "$vramd_pid" 2>/dev/null; then
        echo "installed vramctl status never got an answer from the installed vramd:"
        cat "$tmp/status.err" "$tmp/vramd.log"
        fail=1
        break
    fi
    sleep 0.05
done
grep -q '^DEVICE' "$tmp/status.out" && grep -q '64 MiB' "$tmp/status.out" ||
    { echo "installed vramctl status:"; cat "$tmp/status.out"; fail=1; }
if "$p/bin/vramctl" --socket "$sock" status --json >"$tmp/status.json" 2>&1; then
    grep -Eq '"capacity_bytes":[[:space:]]*67108864' "$tmp/status.json" ||
        { echo "installed vramctl status --json:"; cat "$tmp/status.json"; fail=1; }
else
    echo "installed vramctl status --json failed: $(cat "$tmp/status.json")"; fail=1
fi
# The installed Python package imports from the prefix and finds the
# installed libvram by the path its install recorded: no ldconfig, no
# LD_LIBRARY_PATH, no VRAM_LIBRARY; and talks to the installed vramd.
py=${PYTHON:-/usr/bin/python3}
command -v "$py" >/dev/null || py=python3
pkgdir=$(dirname "$(find "$p" -path '*/vram/__init__.py' | head -n 1)")
if [ "$pkgdir" = . ] || [ ! -e "$pkgdir/_install.py" ]; then
    echo "the Python package, or its vram/_install.py, is not installed"; fail=1
elif [ ! -e "$lib/vramd/libvram_torch_alloc.so" ]; then
    echo "the torch allocator is not installed in $lib/vramd"; fail=1
elif ! out=$(env -u VRAM_LIB -u VRAM_LIBRARY -u VRAM_TORCH_ALLOC \
        PYTHONPATH="$(dirname "$pkgdir")" "$py" - "$p" "$sock" 2>&1 <<'PY'
import sys
import vram
from vram import _lib
prefix, sock = sys.argv[1], sys.argv[2]
assert vram.__file__.startswith(prefix + "/"), vram.__file__
_lib.load()
assert _lib.library_path().startswith(prefix + "/"), _lib.library_path()
with vram.Client(sock, name="installed-python", ctl=True) as c:
    devs = c.status()["devices"]
    assert devs[0]["capacity_bytes"] == 64 << 20, devs
import vram._install as rec
assert rec.TORCH_ALLOC.startswith(prefix + "/"), rec.TORCH_ALLOC
print("python ok:", _lib.library_path())
PY
); then
    echo "the installed Python package: $out"; fail=1
fi

kill "$vramd_pid" 2>/dev/null || true
rc=0
wait "$vramd_pid" || rc=$?
vramd_pid=
[ $rc -eq 0 ] || { echo "installed vramd exited with $rc:"; cat "$tmp/vramd.log"; fail=1; }

# The installed service starts the installed vramd, at the prefix's path.
unit=$p/lib/systemd/system/vramd.service
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ "$exec_start" = "$p/bin/vramd" ] ||
    { echo "$unit: ExecStart=$exec_start, not $p/bin/vramd"; fail=1; }
[ -x "$exec_start" ] || { echo "$unit: ExecStart names no executable: $exec_start"; fail=1; }
if grep -q '@[A-Z_]*@' "$unit" "$p/lib/systemd/system/vramd.socket"; then
    echo "a unit keeps a template's placeholder"; fail=1
fi
if command -v systemd-analyze >/dev/null; then
    if ! out=$(systemd-analyze verify --man=no "$p/lib/systemd/system/vramd.socket" \
               "$unit" 2>&1) || [ -n "$out" ]; then
        echo "systemd-analyze verify of the installed units: $out"; fail=1
    fi
fi

# The man pages render without warnings.
if command -v man >/dev/null; then
    for m in "$p/share/man/man8/vramd.8" "$p/share/man/man1/vramctl.1"; do
        w=$(MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null)
        [ -z "$w" ] || { echo "$m: $w"; fail=1; }
    done
fi

cat >"$tmp/engine.c" <<'C'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <vram.h>
int main(void)
{
    vram_client *c;
    int e = vram_client_connect("/nonexistent/vramd.sock", NULL, &c);
    if (e != -ENOENT) {
        printf("connect to nothing gave %d\n", e);
        return 1;
    }
    printf("ok: %s\n", vram_strerror(e));
    return 0;
}
C
# pkg-config, shared
PKG_CONFIG_PATH="$lib/pkgconfig" cc "$tmp/engine.c" -o "$tmp/engine-pc" \
    $(PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --cflags --libs vram) \
    -Wl,-rpath,"$lib"
"$tmp/engine-pc" | grep -q '^ok' || { echo "pkg-config build does not run"; fail=1; }
# pkg-config, static
PKG_CONFIG_PATH="$lib/pkgconfig" cc "$tmp/engine.c" -o "$tmp/engine-pc-static" \
    $(PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --cflags vram) "$lib/libvram.a" \
    $(PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --static --libs-only-l vram | sed 's/-lvram//')
"$tmp/engine-pc-static" | grep -q '^ok' || { echo "static pkg-config build does not run"; fail=1; }
# find_package(vram), shared and static
mkdir -p "$tmp/cm"
cp "$tmp/engine.c" "$tmp/cm/engine.c"
cat >"$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(engine C)
find_package(vram REQUIRED)
add_executable(engine_shared engine.c)
target_link_libraries(engine_shared PRIVATE vram::vram)
add_executable(engine_static engine.c)
target_link_libraries(engine_static PRIVATE vram::vram_static)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$p" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
"$tmp/cm/build/engine_shared" | grep -q '^ok' || { echo "find_package shared build does not run"; fail=1; }
"$tmp/cm/build/engine_static" | grep -q '^ok' || { echo "find_package static build does not run"; fail=1; }
if ldd "$tmp/cm/build/engine_static" | grep -q libvram; then
    echo "the static engine links libvram.so"; fail=1
fi
[ $fail -eq 0 ] && echo "install: 1 passed, 0 failed" || echo "install: 0 passed, 1 failed"
exit $fail
