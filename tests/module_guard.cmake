# The module guard (cmake/parallax_module.cmake) run on a file of one case, as ctest does:
#   cmake -DROOT=<repository> -DCASE=<case> -P tests/module_guard.cmake
# Each case writes one source of module timeline/ (which may use schedule and plan) in a scratch
# folder and checks it as the configure step does. `allowed` must pass; the others must fail the
# configure, naming the file and the rule.
cmake_minimum_required(VERSION 3.25)
include(${ROOT}/cmake/parallax_module.cmake)
set(dir ${CMAKE_CURRENT_BINARY_DIR}/module_guard_${CASE}/timeline)
if(CASE STREQUAL "allowed")
  set(text "#include \"plan/plan.hpp\"\n#include \"schedule/schedule.hpp\"\n")
elseif(CASE STREQUAL "upward")
  set(text "#include \"plan/plan.hpp\"\n#include \"sim/simulator.hpp\"\n")
elseif(CASE STREQUAL "libtorch")
  set(text "#include <torch/torch.h>\n")
else()
  message(FATAL_ERROR "unknown case '${CASE}'")
endif()
file(WRITE ${dir}/case.cpp "${text}")
set(CMAKE_CURRENT_SOURCE_DIR ${dir})
parallax_check_includes(timeline "schedule;plan" case.cpp)
message(STATUS "module guard: ${CASE} passes")
