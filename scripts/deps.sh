#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs what vramd needs to build (and, with --test, to run the whole test
# suite: systemd's tools, promtool, valgrind, clang for the fuzzer, python3
# and numpy for the Python package's tests, PyTorch (CPU) and OpenBLAS for
# the MoE engine example's test, python3-yaml for the Kubernetes
# manifests' test, curl for the metrics endpoint's test, tmux for
# vramctl top's and libseccomp-dev for vram-seccomp, which applies
# vramd.service's system call filter where no systemd does) on
# Debian 12, as root.
set -eu
pkgs="build-essential cmake pkg-config libuv1-dev libcjson-dev"
[ "${1:-}" = "--test" ] && pkgs="$pkgs systemd prometheus valgrind clang libclang-rt-14-dev python3 python3-numpy python3-venv python3-pip python3-setuptools python3-wheel python3-yaml python3-torch libopenblas0-pthread curl tmux libseccomp-dev"
# The Debian package's test (tests/package/test_package.sh): debhelper for
# dpkg-buildpackage (dh-python for python3-vram), lintian, and debootstrap
# for a clean root.
[ "${1:-}" = "--test" ] && pkgs="$pkgs debhelper dh-python lintian debootstrap"
# The container image (scripts/image.sh): buildah, which runs the
# Containerfile's RUN with chroot isolation (no OCI runtime needed).
[ "${1:-}" = "--test" ] && pkgs="$pkgs buildah"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "== installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
