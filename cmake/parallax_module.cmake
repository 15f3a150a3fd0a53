# parallax_module(NAME <module> SOURCES <files...> [DEPS <modules...>] [LIBS <targets...>])
#
# Declares the library target `parallax_<module>` for one module folder, in the spirit of ns-3's
# build_lib(): every module's CMakeLists is one call. DEPS names other Parallax modules and is the
# only way one module may use another; the arrows allowed are docs/architecture.md's "may use"
# column. To keep those arrows honest, configuration fails when a source or header includes a
# module's header ("sim/engine.hpp") that is not in DEPS. Every module folder is listed here, so
# every module's includes are checked.
set(PARALLAX_MODULES schedule plan timeline sim tune profiler exec fit report gui cli)

function(parallax_check_includes module deps)
  set(files "")
  foreach(source IN LISTS ARGN)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND files ${source})
    cmake_path(REPLACE_EXTENSION source LAST_ONLY .hpp OUTPUT_VARIABLE header)
    if(EXISTS ${header})
      list(APPEND files ${header})   # a source's header is checked with it
    endif()
  endforeach()
  foreach(file IN LISTS files)
    if(module MATCHES "^(schedule|plan|timeline|sim|tune)$")
      # schedule/, plan/, timeline/, sim/ and tune/ build and test anywhere: no LibTorch, Qt or CUDA.
      file(STRINGS "${file}" heavy REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](torch/|ATen/|c10/|Q[A-Za-z]|cuda|cupti|nccl)")
      if(heavy)
        message(FATAL_ERROR "${file}: module '${module}' must not include LibTorch, Qt or CUDA: ${heavy}")
      endif()
    endif()
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
      set(used "${CMAKE_MATCH_1}")
      if(used AND used IN_LIST PARALLAX_MODULES AND NOT used STREQUAL module
         AND NOT used IN_LIST deps)
        message(FATAL_ERROR "${file} includes a ${used}/ header, but module "
                            "'${module}' may only use: ${deps} (docs/architecture.md, \"may use\")")
      endif()
    endforeach()
  endforeach()
endfunction()

function(parallax_module)
  cmake_parse_arguments(M "" "NAME" "SOURCES;DEPS;LIBS" ${ARGN})
  if(NOT M_NAME IN_LIST PARALLAX_MODULES)
    message(FATAL_ERROR "module '${M_NAME}' is not in PARALLAX_MODULES (cmake/parallax_module.cmake): "
                        "other modules' includes of it would go unchecked")
  endif()
  parallax_check_includes(${M_NAME} "${M_DEPS}" ${M_SOURCES})
  set(target parallax_${M_NAME})
  add_library(${target} STATIC ${M_SOURCES})
  # Includes are rooted at the repository: #include "plan/scenario.hpp".
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  list(TRANSFORM M_DEPS PREPEND parallax_ OUTPUT_VARIABLE dep_targets)
  target_link_libraries(${target} PUBLIC ${dep_targets} ${M_LIBS})
endfunction()
