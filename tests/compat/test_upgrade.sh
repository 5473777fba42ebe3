#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A rolling upgrade from each release of releases.txt to the current vramd
# (issue 26, item 3): the release is built once per build tree
# (build_releases.sh), then vram-compat-upgrade (upgrade.c) runs against
# its build: its vramd replaced by the current one, after SIGTERM and
# after SIGKILL, under engines of its libvram and of the current one.
#
# Usage: test_upgrade.sh SOURCE_DIR CACHE_DIR [CC], with VRAMD_BIN,
# VRAM_COMPAT_ENGINE and VRAM_COMPAT_UPGRADE (tests/CMakeLists.txt).
set -u
src=$1
cache=$2
cc=${3:-cc}
for v in VRAMD_BIN VRAM_COMPAT_ENGINE VRAM_COMPAT_UPGRADE; do
    eval "[ -n \"\${$v:-}\" ]" ||
        { echo "test_upgrade: $v is not set (tests/CMakeLists.txt sets it)"; exit 1; }
done
sh "$src/tests/compat/build_releases.sh" "$src" "$cache" "$cc" ||
    { echo "test_upgrade: the releases could not be built"; exit 1; }
versions=$(grep -v '^[[:space:]]*\(#\|$\)' "$src/tests/compat/releases.txt" |
           cut -d' ' -f1)
rc=0
for version in $versions; do
    proto=$(sed -n 's/^ *"protocol_version": *\([0-9]*\),.*/\1/p' \
                "$cache/$version/src/proto/messages.json" | head -n 1)
    echo "test_upgrade: from release $version (protocol $proto)"
    "$VRAM_COMPAT_UPGRADE" "$cache/$version/build" "$proto" || rc=1
done
exit $rc
