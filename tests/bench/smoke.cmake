# SPDX-License-Identifier: Apache-2.0
# bench_smoke: vram-bench --backend host --quick exits 0 and prints only
# JSON objects, one a line, each with "bench" and "backend". Timings are not
# judged here. Run: cmake -DBENCH=path/to/vram-bench -P smoke.cmake
if(NOT BENCH)
  message(FATAL_ERROR "pass -DBENCH=path/to/vram-bench")
endif()
execute_process(COMMAND ${BENCH} --backend host --quick
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vram-bench exited with ${rc}\nstdout:\n${out}\nstderr:\n${err}")
endif()
# The bench writes no ';' in its lines, so each line is one list element.
string(REPLACE "\n" ";" lines "${out}")
set(n 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(JSON type ERROR_VARIABLE jerr TYPE "${line}")
  if(jerr OR NOT type STREQUAL "OBJECT")
    message(FATAL_ERROR "not a JSON object: ${line}\n${jerr}")
  endif()
  foreach(key bench backend)
    string(JSON v ERROR_VARIABLE jerr GET "${line}" ${key})
    if(jerr)
      message(FATAL_ERROR "no \"${key}\" in: ${line}")
    endif()
  endforeach()
  math(EXPR n "${n} + 1")
endforeach()
# The default-configuration phase (what an engine meets) ran.
foreach(name default_first_grant_cold default_first_grant_settled
    default_first_grant_background default_kv_grow
    default_first_expert_request default_kv_grow_background
    default_kv_grow_from_loans)
  string(FIND "${out}" "\"bench\":\"${name}\"" pos)
  if(pos LESS 0)
    message(FATAL_ERROR "no ${name} line:\n${out}")
  endif()
endforeach()
if(n LESS 8)
  message(FATAL_ERROR "only ${n} JSON lines:\n${out}")
endif()
message(STATUS "vram-bench --quick: ${n} JSON lines")
