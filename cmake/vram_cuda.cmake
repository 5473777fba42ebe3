# SPDX-License-Identifier: Apache-2.0
# vram_cuda: the CUDA driver's and NVML's loaders, shared by the daemon's
# cuda backend and the tests (no libcuda or nvml link: both are loaded at
# run time, libcuda.so.1 / nvcuda.dll and libnvidia-ml.so.1 / nvml.dll).
# Included by both builds (CMakeLists.txt, cmake/windows.cmake) once they
# know VRAM_CUDA_INCLUDE_DIR (its sources: cmake/sources.cmake); without
# cuda.h nothing is made. libvram compiles the driver's loader itself.
if(VRAM_CUDA_INCLUDE_DIR)
  add_library(vram_cuda STATIC ${VRAM_CUDA_SOURCES})
  target_include_directories(vram_cuda SYSTEM PUBLIC ${VRAM_CUDA_INCLUDE_DIR})
  target_compile_definitions(vram_cuda PUBLIC VRAM_HAVE_CUDA_H)
  target_link_libraries(vram_cuda PUBLIC vram_platform)
  set_target_properties(vram_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
endif()
