# SPDX-License-Identifier: Apache-2.0
# Writes a module-definition file (.def) exporting exactly the functions
# that client/include/vram.h declares with VRAM_API: what libvram.dll
# exports, and so what its import library offers.
#
#   cmake -DHEADER=client/include/vram.h -DOUT=libvram.def -P cmake/vram_def.cmake
file(READ ${HEADER} text)
# A declaration is VRAM_API, a return type, the name, then "(": the name is
# the last identifier before the parenthesis. The macro's own definition
# ("#define VRAM_API ...") does not start its line with it.
string(REGEX MATCHALL "\n[ \t]*VRAM_API[^;(#]*\\(" decls "${text}")
set(names "")
foreach(d ${decls})
  string(REGEX MATCH "([A-Za-z_][A-Za-z0-9_]*)[ \t\r\n]*\\($" m "${d}")
  if(NOT m)
    message(FATAL_ERROR "vram_def.cmake: cannot read a name in: ${d}")
  endif()
  list(APPEND names ${CMAKE_MATCH_1})
endforeach()
list(REMOVE_DUPLICATES names)
list(LENGTH names n)
if(n EQUAL 0)
  message(FATAL_ERROR "vram_def.cmake: no VRAM_API function in ${HEADER}")
endif()
set(out "LIBRARY libvram.dll\nEXPORTS\n")
foreach(name ${names})
  string(APPEND out "    ${name}\n")
endforeach()
# Written only when it changed, so the DLL is not relinked for nothing.
file(CONFIGURE OUTPUT ${OUT} CONTENT "${out}" @ONLY)
