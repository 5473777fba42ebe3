# SPDX-License-Identifier: Apache-2.0
"""The vram wheel carries its native libraries: libvram (libvram.so.0) and
the PyTorch allocator (libvram_torch_alloc.so), beside the Python files in
vram/, where vram._lib and vram.torch_allocator look first.  So
``pip install ./python`` (in a venv) needs no system libvram, no
LD_LIBRARY_PATH and no ldconfig.

Where the libraries come from, at build time:

- ``VRAM_BUILD_DIR``: an existing CMake build of this tree; its
  libvram.so.0 and libvram_torch_alloc.so are copied, nothing is compiled.
  That build's allocator keeps its own RPATH (the build folder), so such a
  wheel is for the machine of that build; vram.torch_allocator loads the
  libvram beside it first either way.
- otherwise CMake, on this source tree (the folder above python/, or
  ``VRAM_SOURCE_DIR``): a Release build of the two libraries only, in
  setuptools' build folder, with the allocator's RPATH "$ORIGIN" (both lie
  in vram/).  It needs cmake, a C compiler, pkg-config, libcjson-dev and
  libuv1-dev (the configure step checks for the daemon's libuv too), and
  CUDA's cuda.h for libvram to map GPU chunks (without it, host ones only:
  the build warns); at run time libvram needs libcjson1.

``VRAM_WHEEL_NATIVE=0`` builds the pure-Python package alone (libvram then
comes from $VRAM_LIBRARY, the recorded install path or the loader).
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70 has its own
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
LIBVRAM = "libvram.so.0"  # the soname vram._lib looks for beside itself
ALLOC = "libvram_torch_alloc.so"  # vram.torch_allocator.LIBRARY
TARGETS = ("vram", "vram_torch_alloc")


def native():
    return os.environ.get("VRAM_WHEEL_NATIVE", "1") != "0" and sys.platform.startswith("linux")


def source_dir():
    src = os.path.abspath(os.environ.get("VRAM_SOURCE_DIR") or os.path.dirname(HERE))
    if not os.path.isfile(os.path.join(src, "CMakeLists.txt")):
        sys.exit("vram: the wheel builds libvram with CMake from the vramd source "
                 f"tree, and {src} has no CMakeLists.txt: set VRAM_SOURCE_DIR to "
                 "the tree, VRAM_BUILD_DIR to a build of it, or VRAM_WHEEL_NATIVE=0 "
                 "for the pure-Python package")
    return src


def run(cmd):
    print("vram: " + " ".join(cmd), flush=True)
    subprocess.check_call(cmd)


def cmake_build(build_temp):
    """A build of the two libraries for the wheel; returns its folder."""
    src = source_dir()
    out = os.path.join(os.path.abspath(build_temp), "vram-cmake")
    cmake = os.environ.get("CMAKE", "cmake")
    if shutil.which(cmake) is None:
        sys.exit("vram: cmake is needed to build libvram for the wheel "
                 "(apt-get install cmake), or set VRAM_BUILD_DIR to a build")
    run([cmake, "-S", src, "-B", out, "-DCMAKE_BUILD_TYPE=Release",
         "-DVRAM_BUILD_TESTS=OFF", "-DVRAM_INSTALL_PYTHON=OFF", "-DVRAM_WERROR=OFF",
         # Built as installed: no RPATH into the build folder, and the
         # allocator finds libvram beside itself.
         "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DVRAM_TORCH_ALLOC_RPATH=$ORIGIN"])
    with open(os.path.join(out, "CMakeCache.txt"), encoding="utf-8") as f:
        cuda = next((ln.split("=", 1)[1].strip() for ln in f
                     if ln.startswith("VRAM_CUDA_INCLUDE_DIR:")), "")
    if not cuda or cuda.endswith("NOTFOUND"):
        # Without cuda.h libvram maps host chunks only: such a wheel cannot
        # serve an engine on vramd's cuda backend. Said loudly, not refused:
        # the host backend is a real use (tests, CPU engines).
        print("vram: WARNING: no cuda.h found (set CUDA_PATH or install "
              "nvidia-cuda-dev): this wheel's libvram maps host-backend chunks "
              "only, not GPU ones", file=sys.stderr, flush=True)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(min(os.cpu_count() or 1, 8))
    run([cmake, "--build", out, "-j", jobs, "--target", *TARGETS])
    return out


def copy_libs(build, dest):
    for name in (LIBVRAM, ALLOC):
        path = os.path.join(build, name)
        if not os.path.exists(path):
            sys.exit(f"vram: {build} has no {name} (build the targets "
                     f"{' '.join(TARGETS)} there)")
        # The file itself, not the link chain: a wheel holds plain files.
        shutil.copyfile(os.path.realpath(path), os.path.join(dest, name))
        os.chmod(os.path.join(dest, name), 0o755)


class BuildPyNative(build_py):
    """build_py, then libvram and the allocator into the package folder."""

    def run(self):
        super().run()
        if not native():
            return
        build = os.environ.get("VRAM_BUILD_DIR")
        if build and not os.path.isabs(build):
            # pip builds in a folder of its own: a relative path is ambiguous.
            sys.exit(f"vram: VRAM_BUILD_DIR={build}: give an absolute path")
        if not build:
            bt = self.get_finalized_command("build").build_temp
            build = cmake_build(bt)
        dest = os.path.join(self.build_lib, "vram")
        os.makedirs(dest, exist_ok=True)
        copy_libs(build, dest)


class NativeDistribution(Distribution):
    """A distribution with native code: built and installed as platform
    files (platlib, a platform wheel), although no extension module."""

    def has_ext_modules(self):
        return native()


cmdclass = {"build_py": BuildPyNative}

if bdist_wheel is not None:
    class BdistWheelNative(bdist_wheel):
        """A platform wheel (it holds ELF libraries) for any Python 3:
        the package is ctypes over them, no extension module."""

        def get_tag(self):
            if not native():
                return super().get_tag()
            plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheelNative

setup(cmdclass=cmdclass, distclass=NativeDistribution)
