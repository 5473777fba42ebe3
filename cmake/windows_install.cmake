# SPDX-License-Identifier: Apache-2.0
# What an operator copies to a Windows machine, laid out by
#   cmake --install build-win --prefix DIR
# (included at the end of cmake/windows.cmake):
#   DIR/bin/      vramd.exe, vramd-holder.exe (the keeper's holder),
#                 vramctl.exe, vram-replay.exe, libvram.dll
#   DIR/lib/      libvram.dll.a, the import library engines link
#   DIR/include/  vram.h
#   DIR/share/doc/vramd/  README.md, docs/windows.md, docs/operators.md, the example
#                 configuration (vramd.json.example)
# The programs are linked with -static-libgcc and import only system DLLs
# and libvram.dll, so bin/ is complete as it is. test_win_install checks
# the layout and that nothing in bin/ needs a DLL that is not there or in
# Windows itself.
include(GNUInstallDirs)
install(TARGETS vramd vramd-holder RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS vram
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES client/include/vram.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(t vramctl vram-replay)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(FILES README.md docs/windows.md docs/operators.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES windows-service/vramd.json.example DESTINATION ${CMAKE_INSTALL_DOCDIR})

if(VRAM_BUILD_TESTS)
  # Runs on the build machine (cmake -P), not under wine.
  find_program(VRAM_WIN_OBJDUMP NAMES x86_64-w64-mingw32-objdump objdump)
  add_test(NAME test_win_install
    COMMAND ${CMAKE_COMMAND} -DBUILD=${CMAKE_CURRENT_BINARY_DIR}
            -DOBJDUMP=${VRAM_WIN_OBJDUMP}
            -P ${PROJECT_SOURCE_DIR}/tests/win/install_check.cmake)
  set_tests_properties(test_win_install PROPERTIES TIMEOUT 120)
  # The example configuration is one vramd.exe accepts (under wine).
  add_test(NAME test_win_example_config
    COMMAND vramd --check-config ${PROJECT_SOURCE_DIR}/windows-service/vramd.json.example)
  set_tests_properties(test_win_example_config PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "valid \\(2 devices, 2 stages\\)")
endif()
