#!/bin/sh
# Installs the build into a temporary prefix and builds a small engine
# against the installed libvram with pkg-config and with find_package(vram),
# shared and static. Usage: test_install.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d /tmp/vram-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
p=$tmp/prefix
fail=0
for f in bin/vramd bin/vramctl bin/vram-replay include/vram.h \
         lib/systemd/system/vramd.service lib/systemd/system/vramd.socket \
         lib/sysusers.d/vramd.conf lib/tmpfiles.d/vramd.conf \
         share/man/man8/vramd.8 share/man/man1/vramctl.1; do
    [ -e "$p/$f" ] || { echo "not installed: $f"; fail=1; }
done
lib=$(dirname "$(find "$p" -name 'libvram.so' | head -n 1)")
[ -n "$lib" ] && [ -e "$lib/libvram.a" ] && [ -e "$lib/pkgconfig/vram.pc" ] &&
    [ -e "$lib/cmake/vram/vramConfig.cmake" ] || { echo "libraries, vram.pc or the CMake package missing"; exit 1; }

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
