#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: unit, integration (real daemon, real client
# processes), the seed replay, systemd, install, metrics and valgrind checks
# in a build with warnings as errors; the same suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer; the fuzzer for a bounded
# time; the Windows build under wine (with the cuda backend and libvram's
# CUDA mapper where the CUDA headers are: cmake/windows.cmake finds cuda.h
# as the Linux build does, and its ctest checks them); the Debian
# packages; and the container image built from them.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh --test
jobs=$(nproc)

echo "== build and test (Debug, -Werror)"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DVRAM_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs" >/dev/null
(cd build-test && ctest --output-on-failure -j2 --timeout 600)

echo "== the same under AddressSanitizer and UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DVRAM_WERROR=ON -DVRAM_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --output-on-failure -j2 --timeout 600)

echo "== fuzzing the wire for ${VRAM_FUZZ_SECONDS:-60} s and the state file reader for ${VRAM_FUZZ_STATE_SECONDS:-30} s"
sh tests/fuzz/run.sh "${VRAM_FUZZ_SECONDS:-60}" "${VRAM_FUZZ_STATE_SECONDS:-30}"

echo "== the Windows build: cross-compiled with mingw-w64, tested under wine"
sh scripts/windows-test.sh

echo "== the Debian package: dpkg-buildpackage, lintian, install and remove in a debootstrap root"
sh tests/package/test_package.sh build-deb

echo "== the container image: buildah, from that root and those packages; vramd in it answers vramctl status"
sh scripts/image.sh build-deb
