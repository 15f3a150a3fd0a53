# Finds the LibTorch the executor builds against. Two lines, one code base (exec/torch_compat.hpp
# holds their differences):
#   PARALLAX_TORCH=system (default): find_package(Torch) as CMake finds it: Debian's libtorch-dev
#     1.13 (CPU), or whatever Torch_DIR / CMAKE_PREFIX_PATH point at.
#   PARALLAX_TORCH=python: the LibTorch inside a pip-installed torch 2.x, with CUDA when that torch
#     has it. PARALLAX_PYTHON names the interpreter (default: the repository's .venv-torch, which
#     `scripts/setup.sh --torch` makes, else python3 on the PATH).
# Sets PARALLAX_TORCH_VERSION and, for pip's torch, the include folders of the headers that
# torch's own include path lacks: nccl.h (pip's nvidia-nccl package) and gloo's (Debian's
# libgloo-dev, or a prefix from scripts/gpu_deps.sh): ProcessGroupGloo.hpp includes <gloo/...>,
# and pip's torch ships no gloo headers.
set(PARALLAX_TORCH "system" CACHE STRING "LibTorch to build against: system (find_package, Debian's 1.13) or python (pip torch 2.x)")
set_property(CACHE PARALLAX_TORCH PROPERTY STRINGS system python)
if(EXISTS "${PROJECT_SOURCE_DIR}/.venv-torch/bin/python3")
  set(default_python "${PROJECT_SOURCE_DIR}/.venv-torch/bin/python3")
else()
  set(default_python "python3")
endif()
set(PARALLAX_PYTHON "${default_python}" CACHE STRING "Python whose torch PARALLAX_TORCH=python builds against")
set(PARALLAX_EXTRA_TORCH_INCLUDES "")

if(PARALLAX_TORCH STREQUAL "python")
  execute_process(
    COMMAND "${PARALLAX_PYTHON}" -c
            "import os, torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or ''); print(os.path.dirname(os.path.dirname(torch.__file__)))"
    OUTPUT_VARIABLE torch_facts ERROR_VARIABLE torch_error RESULT_VARIABLE torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT torch_rc EQUAL 0)
    message(FATAL_ERROR "PARALLAX_TORCH=python: '${PARALLAX_PYTHON}' cannot import torch (${torch_error}). "
                        "Install it with `scripts/setup.sh --torch` (pip torch into .venv-torch), or name another "
                        "interpreter with -DPARALLAX_PYTHON=/path/to/python3.")
  endif()
  string(REPLACE "\n" ";" torch_facts "${torch_facts}")
  list(GET torch_facts 0 torch_prefix)
  list(GET torch_facts 1 torch_python_version)
  list(GET torch_facts 2 torch_cuda)
  list(GET torch_facts 3 site_packages)
  if(torch_python_version VERSION_LESS 2.0)
    message(FATAL_ERROR "PARALLAX_TORCH=python: ${PARALLAX_PYTHON} has torch ${torch_python_version}; the python line needs torch 2.x")
  endif()
  # torch's config finds its libraries with find_library, which searches the prefixes' lib/
  # before the system's: without torch/ itself as a prefix, a Debian libtorch-dev on the same
  # machine would lend its 1.13 libtorch.so to pip's 2.x headers.
  list(PREPEND CMAKE_PREFIX_PATH "${torch_prefix}" "${site_packages}/torch")
  # Parallax compiles no CUDA sources, so the architectures only silence torch's config, which
  # otherwise compiles and runs a probe for the GPUs of the build machine (and fails where CMake
  # does not know the CUDA compiler's C++20 flag).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  message(STATUS "Parallax: pip torch ${torch_python_version} (CUDA '${torch_cuda}') from ${site_packages}")
  if(torch_cuda)
    # torch's CMake config finds the CUDA toolkit itself; nccl.h is in pip's nvidia-nccl package.
    find_path(PARALLAX_NCCL_INCLUDE nccl.h HINTS "${site_packages}/nvidia/nccl/include" NO_CACHE)
    if(NOT PARALLAX_NCCL_INCLUDE)
      message(FATAL_ERROR "torch ${torch_python_version} has CUDA ${torch_cuda}, but nccl.h is in neither "
                          "${site_packages}/nvidia/nccl/include nor the system's include path (pip install nvidia-nccl-cu13)")
    endif()
    list(APPEND PARALLAX_EXTRA_TORCH_INCLUDES "${PARALLAX_NCCL_INCLUDE}")
  elseif(PARALLAX_REQUIRE_CUDA)
    message(FATAL_ERROR "PARALLAX_REQUIRE_CUDA is on, but the torch of ${PARALLAX_PYTHON} "
                        "(${torch_python_version}) was built without CUDA: install a CUDA build of torch "
                        "(pip's default Linux wheel has CUDA), or turn PARALLAX_REQUIRE_CUDA off")
  endif()
  find_path(PARALLAX_GLOO_INCLUDE gloo/algorithm.h NO_CACHE)
  if(NOT PARALLAX_GLOO_INCLUDE)
    message(FATAL_ERROR "pip's torch has no gloo headers, and ProcessGroupGloo.hpp includes them: install "
                        "Debian's libgloo-dev (scripts/setup.sh does), or add the prefix scripts/gpu_deps.sh fills to "
                        "CMAKE_PREFIX_PATH")
  endif()
  list(APPEND PARALLAX_EXTRA_TORCH_INCLUDES "${PARALLAX_GLOO_INCLUDE}")
elseif(NOT PARALLAX_TORCH STREQUAL "system")
  message(FATAL_ERROR "PARALLAX_TORCH is '${PARALLAX_TORCH}'; it takes 'system' or 'python'")
endif()

find_package(Torch REQUIRED)
set(PARALLAX_TORCH_VERSION "${Torch_VERSION}")
if(PARALLAX_TORCH STREQUAL "python")
  cmake_path(IS_PREFIX site_packages "${TORCH_LIBRARY}" torch_from_pip)
  if(NOT torch_from_pip)
    message(FATAL_ERROR "PARALLAX_TORCH=python found libtorch at ${TORCH_LIBRARY}, outside ${site_packages}: "
                        "a stale CMake cache? Remove the build folder and configure again")
  endif()
  # pip's libtorch.so and libtorch_cpu.so export parts of a newer libstdc++ they were linked with
  # statically (std::filesystem, std::chrono's time zones). Where they precede libstdc++.so.6 in
  # a binary's DT_NEEDED, its own calls bind to those copies: std::filesystem::remove_all then
  # jumped to address 0. Naming libstdc++ first on every link line keeps the binary's calls in
  # the system's libstdc++.
  add_link_options("LINKER:--no-as-needed" "-lstdc++")
endif()
if(PARALLAX_REQUIRE_CUDA AND NOT CAFFE2_USE_CUDA)
  message(FATAL_ERROR "PARALLAX_REQUIRE_CUDA is on, but the LibTorch found (${Torch_DIR}, ${Torch_VERSION}) has "
                      "no CUDA: build with -DPARALLAX_TORCH=python against a CUDA torch")
endif()
message(STATUS "Parallax: LibTorch ${Torch_VERSION} (${PARALLAX_TORCH}), CUDA ${CAFFE2_USE_CUDA}")
