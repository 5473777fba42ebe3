# SPDX-License-Identifier: Apache-2.0
# test_win_install: `cmake --install` of the Windows build into a fresh
# directory gives the layout cmake/windows_install.cmake promises, and the
# programs in bin/ import nothing but Windows' own DLLs and libvram.dll.
# Run with -DBUILD=<build dir> -DOBJDUMP=<mingw objdump>.
cmake_policy(SET CMP0057 NEW) # if(IN_LIST)
set(dest ${BUILD}/install-check)
file(REMOVE_RECURSE ${dest})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${dest}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${out}${err}")
endif()
set(failures 0)
foreach(f bin/vramd.exe bin/vramd-holder.exe bin/vramctl.exe bin/vram-replay.exe bin/libvram.dll
          lib/libvram.dll.a include/vram.h share/doc/vramd/README.md
          share/doc/vramd/windows.md share/doc/vramd/operators.md
          share/doc/vramd/vramd.json.example)
  if(EXISTS ${dest}/${f})
    message(STATUS "PASS: ${f} installed")
  else()
    message(STATUS "FAIL: ${f} is not installed")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()
# The DLLs each program names: Windows' own (or the C runtime that ships
# with it), or libvram.dll beside it. A libgcc, libwinpthread or
# nvcuda.dll here would fail on a machine without them.
set(system KERNEL32.dll ADVAPI32.dll msvcrt.dll ntdll.dll WS2_32.dll
    IPHLPAPI.DLL USERENV.dll SHELL32.dll ole32.dll dbghelp.dll USER32.dll
    bcrypt.dll api-ms-win-core-synch-l1-2-0.dll)
string(TOLOWER "${system}" system)
file(GLOB programs ${dest}/bin/*.exe ${dest}/bin/*.dll)
foreach(p ${programs})
  execute_process(COMMAND ${OBJDUMP} -p ${p} OUTPUT_VARIABLE dump RESULT_VARIABLE rc)
  string(REGEX MATCHALL "DLL Name: [^\r\n]+" names "${dump}")
  get_filename_component(pn ${p} NAME)
  if(NOT rc EQUAL 0 OR NOT names)
    message(STATUS "FAIL: ${pn}: objdump found no imports")
    math(EXPR failures "${failures} + 1")
  endif()
  foreach(n ${names})
    string(REPLACE "DLL Name: " "" dll "${n}")
    string(TOLOWER "${dll}" low)
    if(low IN_LIST system OR low STREQUAL "libvram.dll")
      continue()
    endif()
    message(STATUS "FAIL: ${pn} imports ${dll}, which is neither Windows' nor in bin/")
    math(EXPR failures "${failures} + 1")
  endforeach()
  list(LENGTH names nn)
  message(STATUS "PASS: ${pn} imports ${nn} DLLs, all Windows' own or libvram.dll")
endforeach()
file(REMOVE_RECURSE ${dest})
if(failures GREATER 0)
  message(FATAL_ERROR "test_win_install: ${failures} failed")
endif()
message(STATUS "test_win_install: the layout and the imports are as promised")
