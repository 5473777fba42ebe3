#!/bin/sh
# The whole test suite: unit, integration (real daemon, real client
# processes) and the seed replay, built with warnings as errors.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh --test
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DVRAM_WERROR=ON >/dev/null
cmake --build build-test -j"$(nproc)"
cd build-test
ctest --output-on-failure -j2 --timeout 600
