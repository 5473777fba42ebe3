#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the container image vramd:<version> (deploy/container/Containerfile)
# offline, with buildah, and smoke-tests it: vramd on the host backend
# inside the image, as the manifests' user (65532), answers vramctl status.
#
# No registry is reached: the base is the Debian 12 minbase root that
# tests/package/test_package.sh debootstraps from the apt mirror and caches
# (WORK_DIR/cache), imported as localhost/vramd-base:bookworm, and the
# packages are the ones it built (WORK_DIR/pkg); the script runs it first
# when either is missing. The Containerfile's RUN takes the packages'
# dependencies from the same mirror.
#
# buildah runs RUN steps with chroot isolation: an OCI runtime (crun, runc)
# cannot start a container on this project's CI machines, whose cgroups are
# mounted in hybrid mode (v1 controllers beside an empty v2 hierarchy:
# crun says "cgroups in hybrid mode not supported"). Chroot isolation still
# gives the build its own mount, pid and IPC namespaces, and the smoke test
# runs the image's own files the same way.
#
# Usage: sh scripts/image.sh [WORK_DIR]   (default: build-deb)
#   VRAM_IMAGE_KEEP=1   keep the image (vramd:<version>) after the test
set -eu
cd "$(dirname "$0")/.."
src=$PWD
work=${1:-$src/build-deb}
command -v buildah >/dev/null || { echo "image: buildah is not installed (sh scripts/deps.sh --test)"; exit 1; }
version=$(sed -n 's/^project(vramd VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
image=vramd:$version
base=localhost/vramd-base:bookworm
export BUILDAH_ISOLATION=chroot
t0=$(date +%s)

newest() { ls -t $1 2>/dev/null | head -n 1; }
deb=$(newest "$work/pkg/vramd_$version-*.deb")
root_tar=$(newest "$work/cache/debootstrap-bookworm-*-minbase-*.tar.gz")
if [ -z "$deb" ] || [ -z "$root_tar" ]; then
    echo "== the packages and a Debian root first (tests/package/test_package.sh)"
    sh tests/package/test_package.sh "$work" >"$work.image-package.log" 2>&1 ||
        { tail -n 30 "$work.image-package.log"; echo "image: the package test failed"; exit 1; }
    deb=$(newest "$work/pkg/vramd_$version-*.deb")
    root_tar=$(newest "$work/cache/debootstrap-bookworm-*-minbase-*.tar.gz")
fi
[ -n "$deb" ] && [ -n "$root_tar" ] || { echo "image: no packages or no root in $work"; exit 1; }

ctr=
cleanup() {
    rc=$?
    [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
    buildah rmi "$base" >/dev/null 2>&1 || true
    if [ -z "${VRAM_IMAGE_KEEP:-}" ]; then
        buildah rmi "$image" >/dev/null 2>&1 || true
    fi
    exit $rc
}
trap cleanup EXIT INT TERM

echo "== the base: $(basename "$root_tar") as $base"
ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
tar -C "$mnt" --numeric-owner -xzf "$root_tar"
buildah umount "$ctr" >/dev/null
buildah commit -q "$ctr" "$base" >/dev/null
buildah rm "$ctr" >/dev/null
ctr=

echo "== buildah build $image (deploy/container/Containerfile)"
log=$(mktemp /tmp/vram-image-XXXXXX)
if ! buildah build --isolation chroot --build-arg BASE="$base" \
        --build-arg VERSION="$version" -f "$src/deploy/container/Containerfile" \
        -t "$image" "$work/pkg" >"$log" 2>&1; then
    tail -n 30 "$log"
    rm -f "$log"
    echo "image: buildah build failed"
    exit 1
fi
rm -f "$log"
size=$(buildah images --format '{{.Size}}' "$image" | head -n 1)
echo "  $image: $size"

echo "== smoke test: vramd (host backend) in the image answers vramctl status"
fail=0
cfg=$(buildah inspect --type image --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}' "$image")
[ "$cfg" = "65532:65532 [vramd]" ] || { echo "FAIL: the image's user and entrypoint: $cfg"; fail=1; }
ctr=$(buildah from "$image")
out=$(buildah run --isolation chroot --user 65532:65532 "$ctr" -- sh -c '
    set -e
    d=$(mktemp -d /tmp/vramd-XXXXXX)
    vramd --backend host --socket "$d/vramd.sock" --log-level info >"$d/log" 2>&1 &
    pid=$!
    i=0
    until vramctl --socket "$d/vramd.sock" status >"$d/status" 2>&1; do
        i=$((i + 1))
        if [ $i -ge 200 ] || ! kill -0 $pid 2>/dev/null; then cat "$d/status" "$d/log"; exit 1; fi
        sleep 0.05
    done
    cat "$d/status"
    vramctl --version
    id -u
    kill $pid
    wait $pid' 2>&1) || { echo "FAIL: in the image: $out"; fail=1; }
echo "$out" | sed 's/^/  /'
echo "$out" | grep -q '^DEVICE' || { echo "FAIL: no status from vramd in the image"; fail=1; }
echo "$out" | grep -qx "vramctl $version.*" || { echo "FAIL: vramctl in the image is not $version"; fail=1; }
echo "$out" | grep -qx 65532 || { echo "FAIL: not run as 65532"; fail=1; }
# Nothing of the build is left in the image: no package lists, no .debs.
mnt=$(buildah mount "$ctr")
for f in "$mnt"/var/lib/apt/lists/*_Packages "$mnt"/tmp/debs "$mnt"/var/cache/apt/archives/*.deb; do
    [ ! -e "$f" ] || { echo "FAIL: the image keeps ${f#"$mnt"}"; fail=1; }
done
buildah umount "$ctr" >/dev/null
echo "time: $(( $(date +%s) - t0 )) s"
[ $fail -eq 0 ] && echo "image: 1 passed, 0 failed" || echo "image: 0 passed, 1 failed"
exit $fail
