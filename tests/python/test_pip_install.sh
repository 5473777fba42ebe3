#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# docs/python.md's `pip install ./python` works: into a fresh virtual
# environment, offline (Debian's setuptools, no build isolation), and the
# installed package is the one imported and calls into libvram.
# Usage: test_pip_install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d /tmp/vram-pip-XXXXXX)
keep=1
trap '[ $keep -eq 0 ] && rm -rf "$tmp" || echo "test_pip_install: kept $tmp"' EXIT
# Debian's python3 with its pip, setuptools and wheel, seen from the venv (a venv's own
# bundled setuptools has no bdist_wheel offline).
"${PYTHON:-/usr/bin/python3}" -m venv --system-site-packages --without-pip "$tmp/venv"
# From a copy: setuptools writes build/ and *.egg-info beside the source.
cp -R "$src/python" "$tmp/src"
"$tmp/venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps --no-index \
    "$tmp/src" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
[ ! -e "$src/python/build" ] && [ ! -e "$src/python/vram.egg-info" ] ||
    echo "test_pip_install: note: $src/python has build output from an earlier run"
cd "$tmp"
VRAM_LIB="$build/libvram.so" "$tmp/venv/bin/python" - "$tmp" <<'PY'
import errno, sys
import vram
where = sys.argv[1]
assert vram.__file__.startswith(where + "/venv/"), f"imported {vram.__file__}, not the installed package"
try:
    vram.Client(where + "/no-vramd.sock")
except vram.VramError as e:
    assert e.errno == errno.ENOENT, e
    assert "no-vramd.sock" in e.message, e.message
else:
    raise AssertionError("connected where no vramd listens")
print("test_pip_install: the installed package imports and calls libvram")
PY
"$tmp/venv/bin/python" -m pip uninstall --quiet --yes vram
keep=0
