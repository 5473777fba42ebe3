# SPDX-License-Identifier: Apache-2.0
# bench_scale_smoke: vram-bench-scale --quick --checks exits 0 and prints
# JSON objects, each with "bench" and "value", no "error", and every line
# it should. Timings are not judged here (the daemon runs with its
# invariant checks on, as in every test).
cmake_policy(SET CMP0057 NEW)
if(NOT BENCH)
  message(FATAL_ERROR "pass -DBENCH=path/to/vram-bench-scale")
endif()
execute_process(COMMAND ${BENCH} --quick --checks
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vram-bench-scale exited with ${rc}\n${out}\n${err}")
endif()
# Lines become a list: a semicolon in a line would cut it.
string(REPLACE ";" "," out "${out}")
string(REPLACE "\n" ";" lines "${out}")
set(seen "")
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(JSON e ERROR_VARIABLE jerr GET "${line}" error)
  if(NOT jerr)
    message(FATAL_ERROR "a step failed: ${line}")
  endif()
  foreach(key bench value unit)
    string(JSON v ERROR_VARIABLE jerr GET "${line}" ${key})
    if(jerr)
      message(FATAL_ERROR "no \"${key}\" in: ${line}")
    endif()
  endforeach()
  string(JSON b GET "${line}" bench)
  list(APPEND seen ${b})
endforeach()
foreach(b environment daemon_rss_start daemon_rss_filled status_idle grant_one_call status_loaded
          empty_client control_round_trip recall recall_release recall_regrant
          release_small release daemon_rss daemon_rss_peak)
  if(NOT b IN_LIST seen)
    message(FATAL_ERROR "no \"${b}\" line:\n${out}")
  endif()
endforeach()
