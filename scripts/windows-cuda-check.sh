#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What the Windows build's CUDA pieces are, checked on its own files (no
# compiling, no wine): ctest runs it as test_win_cuda_objects where
# cmake/windows.cmake found cuda.h, which builds those pieces
# (docs/windows.md, "CUDA on Windows"). Nothing here needs a GPU, and
# nothing here runs the CUDA path: that needs a Windows GPU machine.
#
#   sh scripts/windows-cuda-check.sh NM OBJDUMP libvram.dll BACKEND_OBJ MAPPER_OBJ DRIVER_OBJ
#
# BACKEND_OBJ is vramd.exe's daemon/backends/cuda.c object, MAPPER_OBJ
# libvram.dll's client/lib/map_cuda.c, DRIVER_OBJ common/cuda_driver.c's.
# It checks:
#   1. that the objects hold the Windows CUDA code, not the "built without
#      cuda.h" stubs (which compile with no error all the same): the backend
#      references the Win32 handles' security descriptor
#      (vpw_cuda_share_create, platform/win32/cuda_share.c), NVML's WDDM
#      bound (vnvml_fits) and the driver's loader (vcu_load); the mapper the
#      loader and vp_close (the pushed handle closed after the import); the
#      loader run-time loading (vp_dl_open). test_win_backend sees the same
#      of vramd.exe from outside (its "cuda" refusal names nvcuda.dll);
#      nothing else sees it of libvram.dll without a GPU;
#   2. that libvram.dll imports system DLLs only: nvcuda.dll (and nvml.dll)
#      must be loaded at run time, or an engine on a machine without
#      NVIDIA's driver could not load libvram.dll at all (nor one of
#      mingw's runtime DLLs, which an engine would have to ship).
# Exits non-zero, naming what is wrong, when a check fails.
set -eu
die() {
    echo "windows-cuda-check: $*" >&2
    exit 1
}
[ $# = 6 ] || die "usage: $0 NM OBJDUMP libvram.dll BACKEND_OBJ MAPPER_OBJ DRIVER_OBJ"
nm=$1 objdump=$2 dll=$3 backend=$4 mapper=$5 driver=$6
for f in "$dll" "$backend" "$mapper" "$driver"; do
    [ -f "$f" ] || die "$f: no such file (is the build complete?)"
done

has() { # object, symbol, what
    "$nm" "$1" | grep -qw "$2" || die "$(basename "$1") lacks $2: $3"
}
has "$backend" vp_gpu_share_create "the Win32 handles' security descriptor"
has "$backend" vnvml_fits "the WDDM check"
has "$backend" vcu_load "the driver loader (not the no-cuda.h stub)"
has "$mapper" vcu_load "the driver loader (not the no-cuda.h stub)"
has "$mapper" vp_close "closing the imported handle"
has "$driver" vp_dl_open "run-time loading"
echo "windows-cuda-check: the backend, the mapper and the loader hold the Windows CUDA paths"

# The DLLs libvram.dll imports, each a system one.
imports=$("$objdump" -p "$dll" | sed -n 's/^[[:space:]]*DLL Name: //p' | tr -d '\r')
[ -n "$imports" ] || die "$objdump found no imports in $dll"
for d in $imports; do
    case $(echo "$d" | tr '[:upper:]' '[:lower:]') in
    kernel32.dll | advapi32.dll | ntdll.dll | msvcrt.dll | ucrtbase.dll | user32.dll | \
        ws2_32.dll | shell32.dll | ole32.dll | userenv.dll | secur32.dll | bcrypt.dll | \
        psapi.dll | api-ms-win-*.dll) ;;
    *) die "$(basename "$dll") imports $d (only system DLLs; nvcuda.dll is loaded at run time)" ;;
    esac
done
echo "windows-cuda-check: $(basename "$dll") imports only system DLLs:" $imports
