#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs what the Windows cross build needs on Debian 12, as root: the
# mingw-w64 toolchain, wine (to run the tests) and dpkg-dev; then fetches the
# source packages of libuv and cJSON (Debian ships no mingw builds of them;
# cmake/windows.cmake builds them from these trees).
#
#   sh scripts/windows-deps.sh [CACHE_DIR]     (default: build-win-deps/ in the
#                                               source tree)
#
# The source packages need a deb-src entry for bookworm and bookworm-updates
# (main). Where the apt sources have none, one is written to
# /etc/apt/sources.list.d/vramd-deb-src.sources, on the mirror that the
# existing bookworm entry uses. Safe to run again: what is there already is
# left alone.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-$root/build-win-deps}
export DEBIAN_FRONTEND=noninteractive

say() { echo "== windows-deps: $*"; }
die() {
    echo "windows-deps: $*" >&2
    exit 1
}

command -v apt-get >/dev/null || die "apt-get not found: this script is for Debian 12"
# Root only for what must change (packages, the sources list, apt's index).
need_root() {
    [ "$(id -u)" = 0 ] || die "$1: run as root"
}

updated=0
apt_update() {
    if [ "$updated" = 0 ]; then
        need_root "apt-get update"
        say "apt-get update"
        apt-get update -qq
        updated=1
    fi
}

# 1. Packages.
pkgs="gcc-mingw-w64-x86-64 mingw-w64-tools wine64 wine dpkg-dev"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    need_root "installing$missing"
    apt_update
    say "installing:$missing"
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    say "packages already installed: $pkgs"
fi

# 2. A deb-src entry for bookworm and bookworm-updates (main).
# The suites apt has source indexes configured for, from every sources file
# whatever its format.
src_suites() {
    apt-get indextargets --no-release-info --format '$(RELEASE) $(COMPONENT)' \
        'Created-By: Sources' 2>/dev/null | sort -u
}
has_src() { src_suites | grep -qx "$1 main"; }
# The URI and keyring of the existing "deb" entry for bookworm: from deb822
# .sources files (Types/URIs/Suites/Signed-By) or one-line .list files.
mirror_uri=""
signed_by=""
find_mirror() {
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # One stanza per paragraph; print "URI<TAB>keyring" of the first
        # that has Types deb and the suite bookworm.
        line=$(awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && suites ~ /(^| )bookworm( |$)/ &&
                    uris != "" && !done) {
                    split(uris, u, " "); print u[1] "\t" key; done = 1
                }
                types = ""; suites = ""; uris = ""; key = ""
            }
            /^[[:space:]]*$/ { flush(); next }
            /^[[:space:]]*#/ { next }
            /^Types:/     { sub(/^Types:[[:space:]]*/, "");     types = $0 }
            /^URIs:/      { sub(/^URIs:[[:space:]]*/, "");      uris = $0 }
            /^Suites:/    { sub(/^Suites:[[:space:]]*/, "");    suites = $0 }
            /^Signed-By:/ { sub(/^Signed-By:[[:space:]]*/, ""); key = $0 }
            END { flush() }' "$f")
        if [ -n "$line" ]; then
            mirror_uri=$(printf '%s\n' "$line" | cut -f1)
            signed_by=$(printf '%s\n' "$line" | cut -f2)
            return 0
        fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        # deb [options] URI bookworm components...
        line=$(awk '$1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == "bookworm") { print $i; exit }
            }' "$f")
        if [ -n "$line" ]; then
            mirror_uri=$line
            return 0
        fi
    done
    return 1
}
if has_src bookworm && has_src bookworm-updates; then
    say "deb-src for bookworm and bookworm-updates is configured already"
else
    find_mirror || die "no 'deb' entry for bookworm in /etc/apt/sources.list{,.d}: cannot tell which mirror to fetch sources from"
    list=/etc/apt/sources.list.d/vramd-deb-src.sources
    need_root "writing $list"
    say "adding deb-src for bookworm and bookworm-updates from $mirror_uri in $list"
    {
        echo "# Written by vramd's scripts/windows-deps.sh: the source packages of"
        echo "# libuv and cJSON for the Windows cross build."
        echo "Types: deb-src"
        echo "URIs: $mirror_uri"
        echo "Suites: bookworm bookworm-updates"
        echo "Components: main"
        [ -z "$signed_by" ] || echo "Signed-By: $signed_by"
    } >"$list"
    updated=0
fi

# 3. The source trees, in the cache directory.
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
have_tree() { # glob of the unpacked tree, a file it must hold
    for d in "$cache"/$1; do
        [ -f "$d/$2" ] && return 0
    done
    return 1
}
fetch=""
if have_tree 'libuv1-*' CMakeLists.txt; then
    say "libuv source already in $cache: $(cd "$cache" && ls -d libuv1-*/ | tr '\n' ' ')"
else
    fetch="$fetch libuv1"
fi
if have_tree 'cjson-*' cJSON.c; then
    say "cJSON source already in $cache: $(cd "$cache" && ls -d cjson-*/ | tr '\n' ' ')"
else
    fetch="$fetch cjson"
fi
if [ -n "$fetch" ]; then
    if ! has_src bookworm; then
        updated=0
    fi
    apt_update
    has_src bookworm || die "apt has no source index for bookworm after apt-get update"
    say "apt-get source$fetch (into $cache)"
    # As root, apt warns that the download is unsandboxed; the files are
    # still verified against the signed index.
    (cd "$cache" && apt-get source -qq $fetch) ||
        die "apt-get source$fetch failed"
    have_tree 'libuv1-*' CMakeLists.txt || die "no libuv source tree in $cache after apt-get source"
    have_tree 'cjson-*' cJSON.c || die "no cJSON source tree in $cache after apt-get source"
fi
say "ok: toolchain $(x86_64-w64-mingw32-gcc -dumpversion 2>/dev/null || echo '?'), $(/usr/lib/wine/wine64 --version 2>/dev/null || echo 'wine ?'), sources in $cache"
