#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# docs/python.md's `pip install ./python` works, and gives a package that
# carries its native libraries (python/setup.py):
# 1. pip install of the source into a fresh virtual environment, offline
#    (Debian's setuptools and wheel, no build isolation), with libvram and
#    the allocator taken from this build (VRAM_BUILD_DIR);
# 2. a wheel built the shipped way, CMake on the source tree: its file list
#    holds vram/libvram.so.0 and vram/libvram_torch_alloc.so, the allocator
#    finds libvram beside itself ($ORIGIN);
# 3. that wheel installed into a venv with no system site packages (so no
#    torch, no numpy) and nothing else to find libvram by: no
#    LD_LIBRARY_PATH, no VRAM_LIBRARY, no recorded install path. There
#    `import vram` loads the libvram beside it and calls into it, the
#    allocator library loads on its own, and `import vram.torch_allocator`
#    says it needs PyTorch 2.6 (here none is installed; in the venv of 1,
#    which sees Debian's 1.13, it names that version).
# Usage: test_pip_install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/vram-pip-XXXXXX)
keep=1
trap '[ $keep -eq 0 ] && rm -rf "$tmp" || echo "test_pip_install: kept $tmp"' EXIT
fail() { echo "test_pip_install: FAIL $*"; exit 1; }
unset LD_LIBRARY_PATH VRAM_LIBRARY VRAM_LIB VRAM_TORCH_ALLOC || true

# The checks run in an installed venv: python, where, whether torch is seen.
check() {
    env -u LD_LIBRARY_PATH -u VRAM_LIBRARY -u VRAM_LIB -u VRAM_TORCH_ALLOC \
        "$1" - "$2" "$3" <<'PY'
import ctypes, errno, os, sys
where, torch_seen = sys.argv[1], sys.argv[2] == "1"
import vram
from vram import _lib
pkg = os.path.dirname(vram.__file__)
assert pkg.startswith(where + "/"), f"imported {vram.__file__}, not the installed package"
for name in ("libvram.so.0", "libvram_torch_alloc.so"):
    assert os.path.isfile(os.path.join(pkg, name)), f"no {name} in {pkg}"
assert not os.path.exists(os.path.join(pkg, "_install.py")), "an install path recorded"
try:
    vram.Client(where + "/no-vramd.sock")
except vram.VramError as e:
    assert e.errno == errno.ENOENT, e
    assert "no-vramd.sock" in e.message, e.message
else:
    raise AssertionError("connected where no vramd listens")
assert _lib.library_path() == os.path.join(pkg, "libvram.so.0"), \
    f"libvram loaded from {_lib.library_path()}, not the package's"
try:
    import vram.torch_allocator
except ImportError as e:
    msg = str(e)
    assert "needs PyTorch 2.6 or later" in msg, msg
    assert ("none is installed" in msg) != torch_seen, msg
    assert "libvram_torch_alloc" not in msg, msg
else:
    raise AssertionError("vram.torch_allocator imported without PyTorch 2.6")
print(f"test_pip_install: {where}: vram imports and calls its own libvram; "
      f"vram.torch_allocator: {msg}")
PY
    # The allocator alone, in a process that has not loaded libvram: its
    # RUNPATH must find the copy beside it.
    env -u LD_LIBRARY_PATH "$1" -c '
import ctypes, importlib.util, os, sys
pkg = importlib.util.find_spec("vram").submodule_search_locations[0]  # vram not run
assert "vram" not in sys.modules
lib = ctypes.CDLL(os.path.join(pkg, "libvram_torch_alloc.so"))
assert lib.vram_torch_malloc and lib.vram_torch_free
print("test_pip_install: the allocator library loads alone, from", pkg)
'
}

# 1. pip install, from a copy (setuptools writes build/ and *.egg-info
# beside the source), the libraries of this build. Debian's python3 with
# its pip, setuptools and wheel, seen from the venv (a venv's own bundled
# setuptools has no bdist_wheel offline).
"$py" -m venv --system-site-packages --without-pip "$tmp/venv"
cp -R "$src/python" "$tmp/src"
VRAM_BUILD_DIR=$build "$tmp/venv/bin/python" -m pip install --quiet --no-build-isolation \
    --no-deps --no-index "$tmp/src" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; fail "pip install"; }
[ ! -e "$src/python/build" ] && [ ! -e "$src/python/vram.egg-info" ] ||
    echo "test_pip_install: note: $src/python has build output from an earlier run"
cd "$tmp"
check "$tmp/venv/bin/python" "$tmp/venv" 1

# 2. The wheel, the shipped way: CMake builds the two libraries.
cp -R "$src/python" "$tmp/src2"
VRAM_SOURCE_DIR=$src CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    "$tmp/venv/bin/python" -m pip wheel --no-build-isolation --no-deps --no-index \
    -w "$tmp/dist" "$tmp/src2" >"$tmp/wheel.log" 2>&1 || { tail -30 "$tmp/wheel.log"; fail "pip wheel"; }
whl=$(ls "$tmp"/dist/vram-*.whl)
case $whl in *-py3-none-linux_*.whl) ;; *) fail "not a Linux platform wheel: $whl" ;; esac
"$py" - "$whl" <<'PY' || fail "the wheel's files"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("vram/libvram.so.0", "vram/libvram_torch_alloc.so", "vram/__init__.py",
             "vram/torch_allocator.py"):
    assert want in names, f"{want} not in the wheel: {names}"
assert not any(n.endswith("_install.py") for n in names), "an install path in the wheel"
print(f"test_pip_install: the wheel holds {len(names)} files, both libraries among them")
PY
if command -v readelf >/dev/null; then
    mkdir "$tmp/whl"
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$whl" "$tmp/whl"
    rp=$(readelf -d "$tmp/whl/vram/libvram_torch_alloc.so" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p')
    [ "$rp" = '$ORIGIN' ] || fail "the allocator's RUNPATH is '$rp', not \$ORIGIN"
    readelf -d "$tmp/whl/vram/libvram.so.0" | grep -q 'RUNPATH\|RPATH' &&
        fail "libvram has an RPATH: $(readelf -d "$tmp/whl/vram/libvram.so.0" | grep PATH)"
fi

# 3. Installed alone: a venv without the system's packages, pip run on it
# from the first venv (pip --python), nothing built.
"$py" -m venv --without-pip "$tmp/fresh"
"$tmp/venv/bin/python" -m pip --python "$tmp/fresh/bin/python" install --quiet --no-deps \
    --no-index "$whl" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "installing the wheel"; }
"$tmp/fresh/bin/python" -c 'import torch' 2>/dev/null && fail "the fresh venv sees a torch"
check "$tmp/fresh/bin/python" "$tmp/fresh" 0

"$tmp/venv/bin/python" -m pip uninstall --quiet --yes vram
keep=0
echo "test_pip_install: 3 passed, 0 failed"
