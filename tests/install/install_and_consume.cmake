# Driver of the CTest test install_and_consume (registered in tests/CMakeLists.txt). Run as
#
#   cmake -DRESNORM_SOURCE_DIR=... -DRESNORM_BINARY_DIR=... -DWORK_DIR=... [-DCONFIG=Release]
#         [-DGENERATOR=...] [-DCXX_COMPILER=...] [-DEigen3_DIR=...] -P install_and_consume.cmake
#
# (a) installs the configured resnorm build tree into WORK_DIR/prefix;
# (b) builds and runs consumer/ against that prefix with find_package(resnorm 0.1 CONFIG);
# (c) builds and runs subdir_consumer/, which add_subdirectory()s the source tree and asserts
#     that a subproject gets no tests, benchmarks, examples, install rules or warning flags.
# Both consumers use the outer build's generator and compiler, so a clang build tests clang.
cmake_minimum_required(VERSION 3.25)

foreach(required RESNORM_SOURCE_DIR RESNORM_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "install_and_consume.cmake: -D${required}=... is required")
  endif()
endforeach()

set(here "${CMAKE_CURRENT_LIST_DIR}")
set(prefix "${WORK_DIR}/prefix")
# Start from nothing: a stale prefix could hide a header or config file no longer installed.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Settings shared by both consumer configurations.
set(common_args "")
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CONFIG)
  list(APPEND common_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
  set(config_args --config "${CONFIG}")
  set(ctest_config_args -C "${CONFIG}")
endif()
if(Eigen3_DIR)
  # The Eigen the outer build used; the consumer must find_dependency() the same one.
  list(APPEND common_args "-DEigen3_DIR=${Eigen3_DIR}")
endif()

function(run step)
  message(STATUS "install_and_consume: ${step}")
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT COMMAND_ERROR_IS_FATAL ANY)
endfunction()

# --- (a) install ---------------------------------------------------------------------------------
run("install into ${prefix}"
  "${CMAKE_COMMAND}" --install "${RESNORM_BINARY_DIR}" --prefix "${prefix}" ${config_args})

# A header-only package installs headers, package files and the licence, nothing else (in
# particular no test, benchmark or example binaries).
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE "${prefix}" "${prefix}/*")
list(SORT installed)
string(REPLACE ";" "\n  " installed_text "${installed}")
message(STATUS "install_and_consume: installed files:\n  ${installed_text}")
foreach(expected include/resnorm/resnorm.hpp)
  if(NOT "${expected}" IN_LIST installed)
    message(FATAL_ERROR "install_and_consume: ${expected} was not installed")
  endif()
endforeach()
foreach(file IN LISTS installed)
  if(NOT file MATCHES "^(include/resnorm/|share/cmake/resnorm/|share/doc/resnorm/)")
    message(FATAL_ERROR "install_and_consume: unexpected installed file ${file}")
  endif()
endforeach()

# --- (b) find_package consumer -------------------------------------------------------------------
set(find_dir "${WORK_DIR}/find_package")
run("configure the find_package consumer"
  "${CMAKE_COMMAND}" -S "${here}/consumer" -B "${find_dir}" ${common_args}
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DRESNORM_EXPECTED_PREFIX=${prefix}")
run("build the find_package consumer" "${CMAKE_COMMAND}" --build "${find_dir}" ${config_args})
run("run the find_package consumer"
  "${CMAKE_CTEST_COMMAND}" --test-dir "${find_dir}" ${ctest_config_args} --output-on-failure
  --no-tests=error)

# --- (c) add_subdirectory consumer ---------------------------------------------------------------
set(subdir_dir "${WORK_DIR}/add_subdirectory")
run("configure the add_subdirectory consumer"
  "${CMAKE_COMMAND}" -S "${here}/subdir_consumer" -B "${subdir_dir}" ${common_args}
  "-DRESNORM_SOURCE_DIR=${RESNORM_SOURCE_DIR}")
run("build the add_subdirectory consumer" "${CMAKE_COMMAND}" --build "${subdir_dir}" ${config_args})
run("run the add_subdirectory consumer"
  "${CMAKE_CTEST_COMMAND}" --test-dir "${subdir_dir}" ${ctest_config_args} --output-on-failure
  --no-tests=error)

message(STATUS "install_and_consume: passed")
