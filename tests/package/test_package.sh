#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Debian packages (packaging/debian; docs/packaging.md):
#  1. builds vramd, libvram0, libvram-dev and python3-vram with
#     dpkg-buildpackage from a
#     copy of the source tree in WORK_DIR;
#  2. runs lintian on them: any error (E:) fails;
#  3. checks what each package holds (files, owners, modes, nothing in
#     /usr/local), their Depends, and builds an engine against the
#     unpacked libvram-dev with pkg-config and find_package(vram);
#  4. makes a clean Debian root with debootstrap (minbase, from the mirror
#     this machine's apt uses; cached in WORK_DIR as a tarball for 7 days),
#     installs the packages there with apt-get and their dependencies, and
#     checks: the vramd user and group, /run/vramd, the units (vramd.socket
#     enabled, vramd.service and vramd-metrics.service not), the conffile,
#     vramd --check-config on the installed configuration, pkg-config, the
#     tools' versions, a session with the host backend (vramd as the vramd
#     user on the default socket, vramctl as root, as a member of the group
#     vramd and as someone else, and vram-replay holding the seed's memory);
#  5. removes and purges them, checking that nothing is left;
#  6. installs, reinstalls (the upgrade path) and removes them again with
#     a stand-in for systemctl that records what the maintainer scripts ask
#     of systemd: the socket started, the service not started by the
#     package, restarted on upgrade when it runs, and stopped on removal
#     with the socket and the metrics endpoint.
# Needs root, dpkg-dev, debhelper, lintian, debootstrap, cmake and a C
# compiler (sh scripts/deps.sh --test), and the apt mirror. The temporary
# folder (with the root; under $TMPDIR or /tmp, or WORK_DIR where that is
# nodev or noexec) is unmounted and removed when the test passes, kept
# (unmounted) and named when it fails.
# Usage: test_package.sh [WORK_DIR [SOURCE_DIR]]
#   WORK_DIR    where the packages are built and the root is cached
#               (default: build-deb in the source tree)
#   VRAM_PACKAGE_MIRROR=URI   another Debian mirror for debootstrap
#   VRAM_PACKAGE_NO_CACHE=1   debootstrap afresh (and refresh the cache)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "${2:-$here/../..}" && pwd)
work=${1:-$src/build-deb}
mkdir -p "$work"
work=$(cd "$work" && pwd)

t0=$(date +%s)
tphase=$t0
timings=
mark() {
    now=$(date +%s)
    timings="$timings$1 $((now - tphase)) s, "
    tphase=$now
}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
die() { echo "FAIL: $*"; fail=1; exit 1; }

tmp=
root=
mounted=
pids=
cleanup() {
    rc=$?
    [ $rc -eq 0 ] && [ $fail -eq 0 ] || fail=1
    for p in $pids; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    for m in $mounted; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
            echo "could not unmount $m"
    done
    # Never remove a tree with something still mounted in it.
    if [ -n "$root" ] && awk -v r="$root" 'index($2, r "/") == 1 { f = 1 } END { exit !f }' /proc/mounts; then
        echo "still mounted under $root:"
        awk -v r="$root" 'index($2, r "/") == 1 { print "  " $2 }' /proc/mounts
        fail=1
    fi
    if [ -n "$tmp" ]; then
        if [ $fail -eq 0 ]; then
            rm -rf "$tmp"
        else
            echo "kept for a look: $tmp (the root: $tmp/root; nothing mounted)"
        fi
    fi
    [ $fail -eq 0 ] && echo "package: 1 passed, 0 failed" || echo "package: 0 passed, 1 failed"
    exit $fail
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
[ "$work" != "$src" ] || die "WORK_DIR must be a folder of its own, not the source tree"
for c in dpkg-buildpackage dpkg-parsechangelog dh lintian debootstrap chroot cc cmake pkg-config; do
    command -v "$c" >/dev/null || die "$c is missing: sh scripts/deps.sh --test"
done
unset LD_LIBRARY_PATH VRAM_SOCKET
# The root needs device nodes and programs that run: not on a nodev or
# noexec /tmp (then in WORK_DIR).
base=${TMPDIR:-/tmp}
case ,$(findmnt -no OPTIONS -T "$base" 2>/dev/null), in
*,nodev,* | *,noexec,*) base=$work ;;
esac
tmp=$(mktemp -d "$base/vram-package-XXXXXX")
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release"

# ---- 1. build -------------------------------------------------------------
version=$(sed -n 's/^project(vramd VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
debver=$(dpkg-parsechangelog -l "$src/packaging/debian/changelog" -S Version)
case $debver in
"$version"-*) ;;
*) die "packaging/debian/changelog is at $debver, CMakeLists.txt at $version: add an entry for $version-1 at the top of packaging/debian/changelog" ;;
esac
pkg=$work/pkg
tree=$pkg/vramd-$version
rm -rf "$pkg"
mkdir -p "$tree"
# The working tree as git sees it (tracked and new files, without what
# .gitignore leaves out: build trees), or without build*/ and .git elsewhere.
rel=${work#"$src"/}
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$src" && git -c core.quotePath=false ls-files -co --exclude-standard |
        while IFS= read -r f; do
            case $f in "$rel"/*) continue ;; esac
            [ -f "$f" ] || [ -L "$f" ] && printf '%s\n' "$f"
        done) >"$pkg/files"
    tar -C "$src" -cf - -T "$pkg/files" | tar -C "$tree" -xf -
else
    tar -C "$src" --exclude='./build*' --exclude=./.git --exclude="./$rel" -cf - . |
        tar -C "$tree" -xf -
fi
rm -rf "$tree/debian"
cp -R "$src/packaging/debian" "$tree/debian"
echo "== building the packages (dpkg-buildpackage -b in $tree)"
if ! (cd "$tree" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
        dpkg-buildpackage -b -us -uc) >"$pkg/build.log" 2>&1; then
    tail -n 40 "$pkg/build.log"
    die "dpkg-buildpackage failed; the whole log: $pkg/build.log"
fi
debs=
for p in vramd libvram0 libvram-dev python3-vram; do
    d=$pkg/${p}_${debver}_$arch.deb
    [ -f "$d" ] || die "not built: $d"
    debs="$debs $d"
done
ls -l $debs | awk '{ print "  " $5, $NF }'
mark build

# ---- 2. lintian -----------------------------------------------------------
echo "== lintian"
rc=0
lintian --fail-on error --display-info --show-overrides \
    "$pkg/vramd_${debver}_$arch.changes" >"$pkg/lintian.txt" 2>&1 || rc=$?
grep -v '^running with root privileges' "$pkg/lintian.txt" | sed 's/^/  /' || true
echo "  $(grep -c '^E:' "$pkg/lintian.txt" || true) errors, $(grep -c '^W:' "$pkg/lintian.txt" || true) warnings, $(grep -c '^I:' "$pkg/lintian.txt" || true) infos, $(grep -c '^O:' "$pkg/lintian.txt" || true) overridden"
[ $rc -eq 0 ] || bad "lintian: errors (or lintian failed, status $rc)"
mark lintian

# ---- 3. what the packages hold ---------------------------------------------
echo "== contents and relationships"
expect() { # PACKAGE FILE...: each FILE is in the package
    p=$1; shift
    dpkg-deb -c "$pkg/${p}_${debver}_$arch.deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$tmp/$p.list"
    for f; do grep -qxF "$f" "$tmp/$p.list" || bad "$p does not hold $f"; done
}
expect vramd /usr/bin/vramd /usr/bin/vramctl /usr/bin/vram-replay \
    /etc/vramd/vramd.json /lib/systemd/system/vramd.service \
    /lib/systemd/system/vramd.socket /lib/systemd/system/vramd-metrics.service \
    /usr/lib/sysusers.d/vramd.conf \
    /usr/lib/tmpfiles.d/vramd.conf /usr/share/man/man8/vramd.8.gz \
    /usr/share/man/man1/vramctl.1.gz /usr/share/man/man1/vram-replay.1.gz \
    /usr/share/doc/vramd/copyright /usr/share/doc/vramd/changelog.Debian.gz
expect libvram0 "/usr/lib/$multiarch/libvram.so.0" "/usr/lib/$multiarch/libvram.so.$version" \
    /usr/share/doc/libvram0/copyright
expect libvram-dev /usr/include/vram.h "/usr/lib/$multiarch/libvram.so" \
    "/usr/lib/$multiarch/libvram.a" "/usr/lib/$multiarch/pkgconfig/vram.pc" \
    "/usr/lib/$multiarch/cmake/vram/vramConfig.cmake" /usr/share/doc/libvram-dev/copyright
expect python3-vram /usr/lib/python3/dist-packages/vram/__init__.py \
    /usr/lib/python3/dist-packages/vram/_install.py \
    /usr/lib/python3/dist-packages/vram/torch_allocator.py \
    "/usr/lib/$multiarch/vramd/libvram_torch_alloc.so" /usr/share/doc/python3-vram/copyright
for d in $debs; do
    n=$(basename "$d")
    dpkg-deb -c "$d" >"$tmp/contents"
    awk '$2 != "root/root" { print }' "$tmp/contents" | grep . && bad "$n: files not owned by root"
    grep -E ' \./usr/local(/|$)' "$tmp/contents" && bad "$n: files in /usr/local"
    # Nothing writable by group or others (symlinks aside), no set-id bits.
    awk '$1 !~ /^l/ && (substr($1, 6, 1) == "w" || substr($1, 9, 1) == "w" || $1 ~ /[sS]/) { print }' \
        "$tmp/contents" | grep . && bad "$n: writable by others or set-id"
    awk '$1 ~ /^-/ && $6 ~ /\.so(\.[0-9]+)*$/ && $1 != "-rw-r--r--" { print }' \
        "$tmp/contents" | grep . && bad "$n: a shared library not 0644"
done
dep() { dpkg-deb -f "$pkg/${1}_${debver}_$arch.deb" Depends; }
for want in "libvram0 (= $debver)" libuv1 libcjson1 libc6 systemd-sysusers; do
    dep vramd | grep -qF "$want" || bad "vramd does not depend on $want: $(dep vramd)"
done
dep libvram0 | grep -q libcjson1 || bad "libvram0 does not depend on libcjson1: $(dep libvram0)"
for want in "libvram0 (= $debver)" libcjson-dev; do
    dep libvram-dev | grep -qF "$want" || bad "libvram-dev does not depend on $want: $(dep libvram-dev)"
done
for want in "libvram0 (= $debver)" python3; do
    dep python3-vram | grep -qF "$want" || bad "python3-vram does not depend on $want: $(dep python3-vram)"
done
dpkg-deb -e "$pkg/vramd_${debver}_$arch.deb" "$tmp/vramd.control"
grep -qx /etc/vramd/vramd.json "$tmp/vramd.control/conffiles" ||
    bad "/etc/vramd/vramd.json is not a conffile"

# An engine against the unpacked libvram0 and libvram-dev (the multiarch
# library directory, the .so link, vram.pc and the CMake package), run
# against no daemon. vram.pc says prefix=/usr: the unpacked tree's -I and
# -L are given here (the root below checks the flags it gives).
x=$tmp/unpacked
for p in libvram0 libvram-dev; do dpkg-deb -x "$pkg/${p}_${debver}_$arch.deb" "$x"; done
cat >"$tmp/engine.c" <<'C'
#include <errno.h>
#include <stdio.h>
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
lib=$x/usr/lib/$multiarch
if flags=$(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --cflags --libs vram) &&
    cc "$tmp/engine.c" -o "$tmp/engine-pc" -I"$x/usr/include" -L"$lib" $flags &&
    LD_LIBRARY_PATH=$lib "$tmp/engine-pc" | grep -q '^ok'; then :; else
    bad "an engine built with the packaged vram.pc ($flags) does not run"
fi
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
if cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$x/usr" >"$tmp/cm.log" 2>&1 &&
    cmake --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 &&
    LD_LIBRARY_PATH=$lib "$tmp/cm/build/engine_shared" | grep -q '^ok' &&
    "$tmp/cm/build/engine_static" | grep -q '^ok'; then :; else
    cat "$tmp/cm.log"; bad "find_package(vram) on the packaged files"
fi
mark contents

# ---- 4. a clean Debian root -------------------------------------------------
# The deb entries apt uses here, "URI SUITE" with component main, from
# one-line and deb822 sources.
apt_entries() {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk '$1 == "deb" { for (i = 4; i <= NF; i++) if ($i == "main") { print $2, $3; break } }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            function flush(  n, m, i, j, u, s) {
                if (types ~ /(^| )deb( |$)/ && enabled != "no" && comps ~ /(^| )main( |$)/) {
                    n = split(uris, u, " "); m = split(suites, s, " ")
                    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j]
                }
                types = uris = suites = comps = key = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]/ { v = $0; sub(/^[ \t]+/, "", v)
                       if (key == "uris") uris = uris " " v; else if (key == "suites") suites = suites " " v
                       else if (key == "components") comps = comps " " v; else if (key == "types") types = types " " v
                       next }
            { key = tolower($0); sub(/:.*/, "", key); v = $0; sub(/^[^:]*:[ \t]*/, "", v)
              if (key == "types") types = v; else if (key == "uris") uris = v
              else if (key == "suites") suites = v; else if (key == "components") comps = v
              else if (key == "enabled") enabled = tolower(v) }
            END { flush() }' "$f"
    done
}
apt_entries | awk -v c="$codename" '$2 == c || $2 == c "-updates" || $2 == c "-security"' |
    awk '!seen[$0]++' >"$tmp/entries"
mirror=${VRAM_PACKAGE_MIRROR:-$(awk -v c="$codename" '$2 == c { print $1; exit }' "$tmp/entries")}
[ -n "$mirror" ] || die "no apt source for $codename main here (/etc/apt/sources.list, sources.list.d): set VRAM_PACKAGE_MIRROR"
if [ -n "${VRAM_PACKAGE_MIRROR:-}" ]; then
    awk -v m="$mirror" -v c="$codename" '$2 == c "-security" { print; next } { print m, $2 }' \
        "$tmp/entries" | awk '!seen[$0]++' >"$tmp/entries.new"
    grep -q " $codename\$" "$tmp/entries.new" || echo "$mirror $codename" >>"$tmp/entries.new"
    mv "$tmp/entries.new" "$tmp/entries"
fi
# apt's proxy, if it has one, for debootstrap and for apt in the root.
proxy=
eval "$(apt-config shell proxy Acquire::http::Proxy 2>/dev/null)" || true
[ -z "$proxy" ] || export http_proxy="$proxy"

root=$tmp/root
mkdir "$root"
cachedir=$work/cache
mkdir -p "$cachedir"
chmod 0700 "$cachedir"
key=$(printf '%s %s %s minbase' "$mirror" "$codename" "$arch" | md5sum | cut -c1-12)
cache=$cachedir/debootstrap-$codename-$arch-minbase-$key.tar.gz
find "$cachedir" -name 'debootstrap-*.tar.gz' -mmin +$((7 * 24 * 60)) -delete
find "$cachedir" -name 'debootstrap-*.part.tar*' -mmin +60 -delete
from_cache=
if [ -f "$cache" ] && [ -z "${VRAM_PACKAGE_NO_CACHE:-}" ]; then
    echo "== a clean $codename root from the cache ($cache)"
    if tar -C "$root" --numeric-owner -xzf "$cache"; then
        from_cache=1
        mark root-from-cache
    else
        echo "  the cache does not unpack: removed, debootstrap instead"
        rm -f "$cache"
        rm -rf "$root"
        mkdir "$root"
    fi
fi
if [ -z "$from_cache" ]; then
    echo "== debootstrap --variant=minbase $codename from $mirror"
    if ! debootstrap --variant=minbase --arch="$arch" "$codename" "$root" "$mirror" \
            >"$tmp/debootstrap.log" 2>&1; then
        tail -n 20 "$tmp/debootstrap.log"
        die "debootstrap failed; the log: $tmp/debootstrap.log"
    fi
    mark debootstrap
    # Cached once debootstrap succeeded, with nothing mounted in it, without
    # the downloaded packages; each step checked and the result renamed into
    # place, so a failed or cut-short run never leaves half a tarball. Only
    # root can read or replace it (its contents run as root here).
    if ! awk -v r="$root" 'index($2, r "/") == 1 { f = 1 } END { exit !f }' /proc/mounts; then
        rm -f "$root"/var/cache/apt/archives/*.deb "$cache.part.tar" "$cache.part.tar.gz"
        if (umask 077 && tar -C "$root" --numeric-owner -cf "$cache.part.tar" . &&
                gzip -1 "$cache.part.tar" && mv "$cache.part.tar.gz" "$cache"); then
            mark cache-write
        else
            rm -f "$cache.part.tar" "$cache.part.tar.gz"
            echo "  (could not write the cache; the test goes on)"
        fi
    fi
fi
for n in null zero full random urandom; do
    [ -c "$root/dev/$n" ] || die "$root/dev/$n is not a device: debootstrap could not make /dev"
done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
awk '{ print "deb", $1, $2, "main" }' "$tmp/entries" >"$root/etc/apt/sources.list"
[ -z "$proxy" ] || echo "Acquire::http::Proxy \"$proxy\";" >"$root/etc/apt/apt.conf.d/01proxy"
mount -t proc proc "$root/proc"
mounted="$root/proc"

# Commands in the root, with a clean environment.
inroot() {
    chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive ${http_proxy:+http_proxy=$http_proxy} "$@"
}
# As another user (numeric ids, and the supplementary groups given).
inroot_as() { # UID:GID GROUPS CMD...
    spec=$1; groups=$2; shift 2
    chroot --userspec="$spec" ${groups:+--groups="$groups"} "$root" /usr/bin/env -i \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/ LC_ALL=C.UTF-8 "$@"
}
mkdir -p "$root/tmp/debs"
cp $debs "$root/tmp/debs/"
chmod 0755 "$root/tmp/debs"
chmod 0644 "$root"/tmp/debs/*.deb
indebs=
for d in $debs; do indebs="$indebs /tmp/debs/$(basename "$d")"; done

# ---- the packages installed, with their dependencies ------------------------
echo "== apt-get install in the root (no systemd running there)"
if ! inroot apt-get update -qq >"$tmp/apt.log" 2>&1 ||
    ! inroot apt-get install -y -q --no-install-recommends $indebs pkg-config >>"$tmp/apt.log" 2>&1; then
    tail -n 30 "$tmp/apt.log"
    die "apt-get in the root failed; the log: $tmp/apt.log"
fi
mark install
for p in vramd libvram0 libvram-dev python3-vram; do
    s=$(inroot dpkg-query -W -f='${Status} ${Version}' "$p" 2>&1) || true
    [ "$s" = "install ok installed $debver" ] || bad "$p in the root: $s"
done
pw=$(inroot getent passwd vramd) || bad "no user vramd in the root"
gr=$(inroot getent group vramd) || bad "no group vramd in the root"
vuid=$(echo "$pw" | cut -d: -f3)
vgid=$(echo "$gr" | cut -d: -f3)
[ "$(echo "$pw" | cut -d: -f4)" = "$vgid" ] || bad "vramd's primary group is not vramd: $pw / $gr"
[ -n "$vuid" ] && [ "$vuid" -lt 1000 ] || bad "vramd is not a system user: $pw"
case $(echo "$pw" | cut -d: -f7) in */nologin|*/false) ;; *) bad "vramd has a login shell: $pw" ;; esac
# (Numeric ids: the names are the root's, not this machine's.)
[ "$(stat -c '%u:%g %a' "$root/run/vramd" 2>&1)" = "$vuid:$vgid 755" ] ||
    bad "/run/vramd in the root: $(stat -c '%u:%g %a' "$root/run/vramd" 2>&1), not vramd ($vuid:$vgid) 755"
for u in vramd.service vramd.socket vramd-metrics.service; do
    [ -f "$root/lib/systemd/system/$u" ] || bad "$u not in /lib/systemd/system"
done
[ -L "$root/etc/systemd/system/sockets.target.wants/vramd.socket" ] ||
    bad "vramd.socket is not enabled (sockets.target.wants)"
for u in vramd.service vramd-metrics.service; do
    ls "$root"/etc/systemd/system/*.wants/"$u" 2>/dev/null && bad "$u is enabled"
done
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$root/lib/systemd/system/vramd.service")
[ "$exec_start" = /usr/bin/vramd ] || bad "ExecStart=$exec_start"
inroot ldconfig -p | grep -Eq "libvram\.so\.0 .*=> (/usr)?/lib/$multiarch/libvram\.so\.0\$" ||
    bad "libvram.so.0 is not in ld.so's cache"
[ "$(inroot pkg-config --modversion vram 2>&1)" = "$version" ] ||
    bad "pkg-config --modversion vram: $(inroot pkg-config --modversion vram 2>&1)"
# No -I or -L for the system's own directories (-I/usr/include breaks
# C++'s #include_next); cJSON's own directory comes from libcjson.pc.
# (echo without quotes: pkg-config ends its flags with a space.)
libs=$(echo $(inroot pkg-config --libs vram 2>&1))
[ "$libs" = "-lvram" ] || bad "pkg-config --libs vram in the root: $libs"
cflags=$(echo $(inroot pkg-config --cflags vram 2>&1))
[ "$cflags" = "$(echo $(inroot pkg-config --cflags libcjson 2>&1))" ] ||
    bad "pkg-config --cflags vram in the root: $cflags"
out=$(inroot vramd --check-config /etc/vramd/vramd.json 2>&1) && echo "  $out" ||
    bad "vramd --check-config /etc/vramd/vramd.json: $out"
for t in vramd vramctl vram-replay; do
    out=$(inroot "$t" --version 2>&1) || bad "$t --version: $out"
    case $out in "$t $version"*) echo "  $out" ;; *) bad "$t --version: $out" ;; esac
done
out=$(inroot vramd --backend cuda --socket /tmp/none/vramd.sock 2>&1) || true
echo "  without a GPU: $(echo "$out" | tail -n 1)"
mark checks

# ---- a session with the host backend ------------------------------------------
# As the service runs it: vramd as the vramd user on the default socket in
# the /run/vramd that systemd-tmpfiles made, with the seed's split.
echo "== a session in the root: vramd --backend host as vramd, vramctl, vram-replay"
cp "$src/tests/scenarios/seed-pp32-16.json" "$root/tmp/seed.json"
chmod 0644 "$root/tmp/seed.json"
inroot useradd --system --no-create-home alice
inroot useradd --system --no-create-home bob
auid=$(inroot id -u alice); agid=$(inroot id -g alice)
buid=$(inroot id -u bob); bgid=$(inroot id -g bob)
# (chroot itself in the background, so that $! is the daemon: chroot and env exec.)
chroot --userspec="$vuid:$vgid" "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/ LC_ALL=C.UTF-8 /usr/bin/vramd --backend host --config /tmp/seed.json \
    --log-level info >"$tmp/vramd.log" 2>&1 &
vramd_pid=$!
pids="$vramd_pid"
i=0
until inroot vramctl status >"$tmp/status.out" 2>"$tmp/status.err"; do
    i=$((i + 1))
    if [ $i -ge 200 ] || ! kill -0 "$vramd_pid" 2>/dev/null; then
        cat "$tmp/status.err" "$tmp/vramd.log"
        die "vramctl status never got an answer from vramd in the root"
    fi
    sleep 0.05
done
grep -q '^DEVICE' "$tmp/status.out" || bad "vramctl status: $(cat "$tmp/status.out")"
[ "$(stat -c '%u:%g %a' "$root/run/vramd/vramd.sock")" = "$vuid:$vgid 660" ] ||
    bad "the socket: $(stat -c '%u:%g %a' "$root/run/vramd/vramd.sock"), not vramd ($vuid:$vgid) 660"
# The group vramd is who may connect; others are refused (exit status 4).
inroot_as "$auid:$agid" "$vgid" /usr/bin/vramctl status >/dev/null 2>"$tmp/alice.err" ||
    bad "vramctl status as a member of the group vramd: $(cat "$tmp/alice.err")"
rc=0
inroot_as "$buid:$bgid" "" /usr/bin/vramctl status >/dev/null 2>"$tmp/bob.err" || rc=$?
[ $rc -eq 4 ] || bad "vramctl status as someone outside the group vramd: status $rc, $(cat "$tmp/bob.err")"
# An engine user's replay of the seed, holding its memory.
chroot --userspec="$auid:$agid" --groups="$vgid" "$root" /usr/bin/env -i \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/ LC_ALL=C.UTF-8 \
    /usr/bin/vram-replay --hold /tmp/seed.json >"$tmp/replay.out" 2>"$tmp/replay.err" &
replay_pid=$!
pids="$replay_pid $pids"
i=0
until grep -q '"holding"' "$tmp/replay.out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -ge 600 ] || ! kill -0 "$replay_pid" 2>/dev/null; then
        cat "$tmp/replay.out" "$tmp/replay.err" "$tmp/vramd.log"
        die "vram-replay in the root did not get to hold its memory"
    fi
    sleep 0.05
done
[ "$(grep -c '"step"' "$tmp/replay.out")" -eq 4 ] || bad "vram-replay: $(cat "$tmp/replay.out")"
inroot vramctl status --json >"$tmp/held.json" 2>&1 || bad "vramctl status --json: $(cat "$tmp/held.json")"
# After the seed's switch to 8,192 tokens: 160 MiB of KV on device 0 and
# 1,952 MiB lent to experts (README.md, docs/install.md).
grep -Eq '"kv_bytes":[[:space:]]*167772160' "$tmp/held.json" &&
    grep -Eq '"loaned_bytes":[[:space:]]*2046820352' "$tmp/held.json" ||
    bad "vramctl status while vram-replay holds: $(cat "$tmp/held.json")"
inroot vramctl status | sed 's/^/  /'
# python3-vram imports on the clean root, finds libvram where libvram0 put
# it, and sees the replay's memory, as an engine user of the group vramd.
if ! out=$(inroot_as "$auid:$agid" "$vgid" python3 -c '
import sys, vram
from vram import _lib
with vram.Client("/run/vramd/vramd.sock", name="python3-vram") as c:
    st = c.status()
print(vram.__version__, _lib.library_path(), st["devices"][0]["kv_bytes"])
' 2>&1); then
    bad "python3-vram in the root: $out"
else
    echo "  python3-vram: $out"
    [ "$out" = "$version /usr/lib/$multiarch/libvram.so.0 167772160" ] ||
        bad "python3-vram in the root: $out, not '$version /usr/lib/$multiarch/libvram.so.0 167772160'"
fi
kill "$replay_pid"
rc=0
wait "$replay_pid" || rc=$?
pids=$vramd_pid
[ $rc -eq 0 ] || [ $rc -eq 143 ] || bad "vram-replay exited with $rc: $(cat "$tmp/replay.err")"
# Its memory back: no client holds or keeps anything (vramctl itself is one).
i=0
while inroot vramctl clients --json >"$tmp/clients.json" 2>&1 &&
    grep -Eq '"(held|quarantined)_bytes":[1-9]' "$tmp/clients.json"; do
    i=$((i + 1))
    [ $i -lt 100 ] || { bad "the replay's memory stays held: $(cat "$tmp/clients.json")"; break; }
    sleep 0.05
done
kill "$vramd_pid"
rc=0
wait "$vramd_pid" || rc=$?
pids=
[ $rc -eq 0 ] || bad "vramd in the root exited with $rc: $(cat "$tmp/vramd.log")"
mark session

# ---- removed, then purged: nothing left ---------------------------------------
leftovers() { # what is left of vramd in the root, but the documented remains
    find "$root" -xdev \( -name '*vramd*' -o -name '*libvram*' -o -name 'vram*' \) \
        -not -path "$root/tmp/*" -not -path "$root/run/vramd" -not -path "$root/run/vramd/*" \
        -not -path "$root/proc/*" 2>/dev/null | sed "s|^$root||"
}
echo "== apt-get remove, then purge"
inroot apt-get remove -y -q vramd python3-vram libvram-dev libvram0 >"$tmp/remove.log" 2>&1 ||
    { cat "$tmp/remove.log"; bad "apt-get remove in the root"; }
s=$(inroot dpkg-query -W -f='${Status}' vramd 2>&1) || true
[ "$s" = "deinstall ok config-files" ] || bad "vramd after remove: $s"
for f in /usr/bin/vramd /usr/bin/vramctl /lib/systemd/system/vramd.service \
         /lib/systemd/system/vramd.socket "/usr/lib/$multiarch/libvram.so.0" /usr/include/vram.h \
         /usr/lib/python3/dist-packages/vram "/usr/lib/$multiarch/vramd"; do
    [ ! -e "$root$f" ] || bad "$f is left after remove"
done
[ -f "$root/etc/vramd/vramd.json" ] || bad "remove (not purge) removed the conffile"
for p in libvram0 libvram-dev python3-vram; do
    s=$(inroot dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || true
    [ -z "$s" ] || [ "$s" = "unknown ok not-installed" ] || bad "$p after remove: $s"
done
# (libvram0 and libvram-dev have no conffiles: removed is gone for dpkg.)
inroot apt-get purge -y -q vramd >"$tmp/purge.log" 2>&1 ||
    { cat "$tmp/purge.log"; bad "apt-get purge in the root"; }
for p in vramd libvram0 libvram-dev python3-vram; do
    s=$(inroot dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || true
    [ -z "$s" ] || [ "$s" = "unknown ok not-installed" ] || bad "$p after purge: $s"
done
left=$(leftovers)
[ -z "$left" ] || bad "left after purge: $left"
inroot getent passwd vramd >/dev/null || bad "purge removed the user vramd (system users stay)"
mark remove-purge

# ---- what the maintainer scripts ask of systemd ---------------------------------
# A stand-in systemctl that records its calls, and /run/systemd/system so
# that the scripts believe systemd runs: a fresh install, a reinstall (the
# upgrade path) while vramd.service runs, and a removal. apt runs dpkg with
# a PATH of its own (DPkg::Path), given here with the stand-in's folder
# first.
echo "== install, reinstall and remove with a recording systemctl"
mkdir -p "$root/run/systemd/system" "$root/usr/local/sbin"
cat >"$root/usr/local/sbin/systemctl" <<'SH'
#!/bin/sh
# The package test's stand-in: records each call. What works on files
# (--root=: deb-systemd-helper's preset) is the real systemctl's;
# is-enabled answers from the symlinks, is-active from /tmp/active.
echo "$*" >>/tmp/systemctl.log
case " $* " in *" --root="*) exec /usr/bin/systemctl "$@" ;; esac
for a; do last=$a; done
case " $* " in
*" is-enabled "*)
    for w in /etc/systemd/system/*.wants/"$last"; do
        [ -L "$w" ] && { echo enabled; exit 0; }
    done
    echo disabled; exit 1 ;;
*" is-active "*) grep -qx "$last" /tmp/active 2>/dev/null && exit 0; exit 3 ;;
esac
exit 0
SH
chmod 0755 "$root/usr/local/sbin/systemctl"
dpkgpath=-oDPkg::Path=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
calls() { # the state changes asked for: start, stop, restart, try-restart
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(start|stop|restart|try-restart)$/) { print $i, $NF; next } }' \
        "$root/tmp/systemctl.log" | sort | tr '\n' ',' | sed 's/,$//'
}
run_recorded() { # WHAT EXPECTED APT-ARGS...: the calls must be EXPECTED (sorted)
    what=$1; want=$2; shift 2
    : >"$root/tmp/systemctl.log"
    inroot apt-get "$dpkgpath" -y -q "$@" >"$tmp/recorded.log" 2>&1 ||
        { cat "$tmp/recorded.log"; bad "apt-get $* with a recording systemctl"; }
    c=$(calls)
    echo "  $what: ${c:-nothing}"
    [ "$c" = "$want" ] || bad "$what asked systemd for '$c', not '$want'"
}
# Installing starts the socket, not the service (not enabled: the socket
# starts it).
run_recorded installing "start vramd.socket" install --no-install-recommends $indebs
# An upgrade leaves the socket listening and restarts a running vramd.
echo vramd.service >"$root/tmp/active"
run_recorded "upgrading while vramd runs" "restart vramd.service,start vramd.socket" \
    install --reinstall --no-install-recommends $indebs
rm -f "$root/tmp/active"
# Removing stops vramd, its socket and the metrics endpoint.
run_recorded removing "stop vramd-metrics.service,stop vramd.service,stop vramd.socket" \
    purge vramd python3-vram libvram-dev libvram0
rm -rf "$root/usr/local/sbin/systemctl" "$root/run/systemd"
left=$(leftovers)
[ -z "$left" ] || bad "left after the second purge: $left"
mark maintainer-scripts

echo "time: ${timings}total $(( $(date +%s) - t0 )) s"
