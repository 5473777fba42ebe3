#!/bin/sh
# The CUDA backend for Windows, compiled with mingw-w64 against the CUDA
# headers, until cmake/windows.cmake builds it (docs/windows.md, "CUDA on
# Windows", says how to fold it in). Nothing here needs a GPU, and nothing
# here runs the CUDA path: that needs a Windows GPU machine.
#
# What it does:
#   1. compiles, to objects, with the Windows build's warnings as errors
#      (-std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes
#      -Wmissing-prototypes -Werror) and VRAM_HAVE_CUDA_H:
#        common/cuda_driver.c      nvcuda.dll loaded at run time
#        common/nvml.c             nvml.dll, and the WDDM bound (vnvml_fits)
#        daemon/backends/cuda.c    CU_MEM_HANDLE_TYPE_WIN32 chunks, the
#                                  support attribute, the WDDM check
#        client/lib/map_cuda.c     import, then close the pushed handle
#        platform/win32/cuda_share.c  the handles' security descriptor
#      and checks in the objects that the Windows CUDA code is what got
#      compiled (not the "built without cuda.h" stubs);
#   2. builds tests/win/test_win_cuda.exe (no GPU needed) and, when wine is
#      there, runs it: the SDDL and DACL of the handles' descriptor, the
#      loaders' clean failure without nvcuda.dll and nvml.dll, the WDDM
#      bound's arithmetic and message.
#
#   sh scripts/windows-cuda-check.sh          # compile, build the test, run it
#   VRAM_WIN_RUN=0 sh scripts/windows-cuda-check.sh   # compile and build only
#   CUDA_INCLUDE=/path/to/cuda/include sh scripts/windows-cuda-check.sh
#
# Needs gcc-mingw-w64-x86-64 (scripts/windows-deps.sh installs it), a host
# cc with libcjson-dev (for the protocol's generated header, which
# map_cuda.c includes through client/lib/internal.h), and cuda.h (the
# toolkit's, no driver). Exits non-zero when anything fails. The tree's path
# must have no spaces (the flags are word-split).
set -eu
cd "$(dirname "$0")/.."
root=$PWD
cc_win=${VRAM_WIN_CC:-x86_64-w64-mingw32-gcc}
nm_win=${VRAM_WIN_NM:-x86_64-w64-mingw32-nm}
cuda_inc=${CUDA_INCLUDE:-/usr/local/cuda/include}
host_cc=${VRAM_HOST_CC:-cc}

die() {
    echo "windows-cuda-check: $*" >&2
    exit 1
}
command -v "$cc_win" >/dev/null || die "$cc_win not found (apt-get install gcc-mingw-w64-x86-64)"
[ -f "$cuda_inc/cuda.h" ] || die "no cuda.h in $cuda_inc (set CUDA_INCLUDE)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vram-wincuda.XXXXXX")
wineserver=${VRAM_WINESERVER:-/usr/lib/wine/wineserver64}
cleanup() {
    if [ -n "${started_wine:-}" ]; then
        WINEPREFIX=$tmp/wineprefix "$wineserver" -k >/dev/null 2>&1 || true
        WINEPREFIX=$tmp/wineprefix "$wineserver" -w >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# The catalogue's C header (vram_msg.h), generated as both builds do.
echo "== generating proto/messages.json's header with the host's $host_cc"
cjson=$(pkg-config --cflags --libs libcjson 2>/dev/null || echo -lcjson)
# shellcheck disable=SC2086
"$host_cc" -std=c11 -D_GNU_SOURCE -O1 -o "$tmp/vram_msggen" proto/gen/msggen.c $cjson -lm ||
    die "building vram_msggen failed (apt-get install libcjson-dev)"
mkdir -p "$tmp/gen"
"$tmp/vram_msggen" proto/messages.json "$tmp/gen" >/dev/null || die "vram_msggen failed"

# cJSON's header, which proto/msg.h includes as <cjson/cJSON.h>: from
# Debian's source package where scripts/windows-deps.sh put it (what the
# Windows build uses), else the host's libcjson-dev copy of the same
# version. Copied alone, so that no other host header is in reach.
cjson_h=
for d in "${VRAM_WIN_DEPS_DIR:-$root/build-win-deps}"/cjson-*; do
    [ -f "$d/cJSON.h" ] && cjson_h=$d/cJSON.h
done
[ -n "$cjson_h" ] || cjson_h=/usr/include/cjson/cJSON.h
[ -f "$cjson_h" ] || die "no cJSON.h (run scripts/windows-deps.sh, or apt-get install libcjson-dev)"
mkdir -p "$tmp/cjson-include/cjson"
cp "$cjson_h" "$tmp/cjson-include/cjson/cJSON.h"

# The Windows build's flags (cmake/windows.cmake), -Wno-unused-parameter
# left out: these files pass without it. platform/win32/include supplies
# EDQUOT and ESTALE, as in that build; cuda.h is a system header there too.
flags="-std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
 -fdata-sections -DVRAM_HAVE_CUDA_H -D__USE_MINGW_ANSI_STDIO=1 -DCJSON_HIDE_SYMBOLS"
incs="-isystem $root/platform/win32/include -isystem $cuda_inc -isystem $tmp/cjson-include -I$root/common -I$root/platform
 -I$root/platform/win32 -I$root/daemon -I$root/daemon/backends -I$root/daemon/ledger
 -I$root/proto -I$tmp/gen -I$root/client/lib -I$root/client/include -I$root/tests
 -I$root/tests/win"

compile() { # source, object
    echo "   $1"
    # shellcheck disable=SC2086
    "$cc_win" $flags $incs -c "$1" -o "$2" || die "$1 does not compile for Windows"
}
echo "== compiling the CUDA sources for Windows ($("$cc_win" -dumpversion), cuda.h from $cuda_inc)"
compile common/cuda_driver.c "$tmp/cuda_driver.o"
compile common/nvml.c "$tmp/nvml.o"
compile daemon/backends/cuda.c "$tmp/backend_cuda.o"
compile client/lib/map_cuda.c "$tmp/map_cuda.o"
compile platform/win32/cuda_share.c "$tmp/cuda_share.o"

# The objects hold the Windows CUDA code: the backend calls the security
# descriptor's helper and NVML's bound (only its _WIN32/VRAM_HAVE_CUDA_H
# path does), the mapper loads the driver.
has() { # object, symbol, what
    "$nm_win" "$1" | grep -qw "$2" || die "$(basename "$1") lacks $2: $3"
}
has "$tmp/backend_cuda.o" vpw_cuda_share_create "the Win32 handles' security descriptor"
has "$tmp/backend_cuda.o" vnvml_fits "the WDDM check"
has "$tmp/backend_cuda.o" vcu_load "the driver loader (not the no-cuda.h stub)"
has "$tmp/map_cuda.o" vcu_load "the driver loader (not the no-cuda.h stub)"
has "$tmp/map_cuda.o" vp_close "closing the imported handle"
has "$tmp/cuda_driver.o" vp_dl_open "run-time loading"
echo "== the five objects compile with -Werror and hold the Windows CUDA paths"

# The test, linked with the platform files it stands on.
echo "== building test_win_cuda.exe"
plat="winerr wstr handle clock conn_state conn identity proc dl"
objs="$tmp/cuda_driver.o $tmp/nvml.o $tmp/cuda_share.o"
for f in $plat; do
    # These as cmake/windows.cmake builds them, -Wno-unused-parameter too.
    # shellcheck disable=SC2086
    "$cc_win" $flags -Wno-unused-parameter $incs -c "platform/win32/$f.c" -o "$tmp/p_$f.o" ||
        die "platform/win32/$f.c does not compile"
    objs="$objs $tmp/p_$f.o"
done
compile tests/win/test_win_cuda.c "$tmp/test_win_cuda.o"
# shellcheck disable=SC2086
"$cc_win" -o "$tmp/test_win_cuda.exe" "$tmp/test_win_cuda.o" $objs \
    -static-libgcc -Wl,--stack,8388608 -ladvapi32 -lntdll ||
    die "linking test_win_cuda.exe failed"
if [ -n "${VRAM_WIN_TEST_OUT:-}" ]; then
    cp "$tmp/test_win_cuda.exe" "$VRAM_WIN_TEST_OUT"
    echo "   copied to $VRAM_WIN_TEST_OUT"
fi

wine=${VRAM_WINE:-/usr/lib/wine/wine64}
if [ "${VRAM_WIN_RUN:-1}" = 0 ]; then
    echo "== not run (VRAM_WIN_RUN=0)"
    exit 0
fi
[ -x "$wine" ] || die "$wine not found (apt-get install wine64), or VRAM_WIN_RUN=0"
echo "== running test_win_cuda.exe under wine (a fresh prefix)"
export WINEPREFIX="$tmp/wineprefix" WINEDEBUG=-all
mkdir -p "$WINEPREFIX"
started_wine=1
# wine's helper processes start with the first program: on /dev/null, so
# they hold no pipe of ours (WINDOWS.md, "Pitfalls of wine in CI").
"$wine" cmd /c exit </dev/null >/dev/null 2>&1 || die "wine could not start in $WINEPREFIX"
"$wine" "$tmp/test_win_cuda.exe" </dev/null || die "test_win_cuda failed"
echo "== windows-cuda-check: passed (compiled and unit-tested; the CUDA path itself is untested: it needs a Windows GPU machine)"
