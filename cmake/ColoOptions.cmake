# Build options. Every part the README promises is ON by default; a part is left out only when the
# user says so (-DCOLO_BUILD_UI=OFF, ...). A part that is ON but whose libraries are missing stops the
# configure with the Debian packages to install, so no part is ever silently missing (CI included).
# Detection runs on every configure, so installing a missing package and re-configuring picks it up.
#
#   COLO_BUILD_UI        colo-studio, Qt 6 (Widgets, Charts, Concurrent, Svg, Test, OpenGL for Charts)
#   COLO_BUILD_EXECUTOR  profiler + executor: colo-profile, colo-run (LibTorch with c10d and Gloo)
#   COLO_BUILD_TESTS     GoogleTest / Qt Test suites
#   COLO_WITH_CUDA       CUDA kernels: AUTO (default: on when nvcc is found), ON or OFF
#   COLO_WERROR          treat warnings as errors (CI turns this on)

include(CheckLanguage)

# Build folders configured before options defaulted ON cached an automatic OFF that was never the
# user's choice; forget those once so the part is built from now on.
if(NOT DEFINED COLO_OPTIONS_SCHEME AND EXISTS ${CMAKE_BINARY_DIR}/CMakeCache.txt)
  foreach(part COLO_BUILD_UI COLO_BUILD_EXECUTOR COLO_BUILD_TESTS COLO_WITH_CUDA)
    unset(${part} CACHE)
  endforeach()
endif()
if(NOT DEFINED COLO_OPTIONS_SCHEME)
  set(COLO_OPTIONS_SCHEME 2 CACHE INTERNAL "parts default ON; OFF only when asked")
endif()

option(COLO_BUILD_UI "build colo-studio (Qt 6)" ON)
option(COLO_BUILD_EXECUTOR "build the profiler and executor (LibTorch)" ON)
option(COLO_BUILD_TESTS "build the test suites" ON)
set(COLO_WITH_CUDA AUTO CACHE STRING "build CUDA kernels: AUTO, ON or OFF")
set_property(CACHE COLO_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(COLO_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures the CUDA kernels are compiled for")
option(COLO_WERROR "treat compiler warnings as errors" OFF)

# _colo_require(<option> <what> <packages...>): stop the configure when a part is ON and its
# libraries were not found, naming the Debian packages that provide them.
function(_colo_require option what)
  set(packages ${ARGN})
  list(REMOVE_DUPLICATES packages)
  list(JOIN packages " " packages)
  message(FATAL_ERROR
    "${option} is ON but ${what}.\n"
    "Install the missing Debian packages (scripts/setup.sh --deps-only does): apt-get install ${packages}\n"
    "and configure again, or leave the part out with -D${option}=OFF.")
endfunction()

set(_colo_ui_why "not requested (-DCOLO_BUILD_UI=OFF)")
if(COLO_BUILD_UI)
  # Qt6Charts' package needs Qt6::OpenGL; asking for OpenGL too names its package when it is missing.
  set(_colo_qt_components Widgets Concurrent Test OpenGL Charts Svg)
  set(_colo_qt_packages_Widgets qt6-base-dev)
  set(_colo_qt_packages_Concurrent qt6-base-dev)
  set(_colo_qt_packages_Test qt6-base-dev)
  set(_colo_qt_packages_OpenGL libqt6opengl6-dev)
  set(_colo_qt_packages_Charts qt6-charts-dev)
  set(_colo_qt_packages_Svg qt6-svg-dev)
  find_package(Qt6 6.2 QUIET COMPONENTS ${_colo_qt_components})
  set(_colo_qt_missing "")
  set(_colo_qt_missing_packages "")
  foreach(component IN LISTS _colo_qt_components)
    if(NOT Qt6${component}_FOUND)
      list(APPEND _colo_qt_missing Qt6${component})
      list(APPEND _colo_qt_missing_packages ${_colo_qt_packages_${component}})
    endif()
  endforeach()
  if(_colo_qt_missing)
    list(JOIN _colo_qt_missing ", " _colo_qt_missing_text)
    _colo_require(COLO_BUILD_UI "${_colo_qt_missing_text} not found" ${_colo_qt_missing_packages})
  endif()
  set(_colo_ui_why "Qt ${Qt6_VERSION}")
endif()

# LibTorch: Debian's libtorch-dev installs TorchConfig.cmake; on a GPU machine pass
# -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
set(_colo_exec_why "not requested (-DCOLO_BUILD_EXECUTOR=OFF)")
if(COLO_BUILD_EXECUTOR)
  find_package(Torch QUIET)
  if(NOT (Torch_FOUND OR TORCH_FOUND))
    _colo_require(COLO_BUILD_EXECUTOR "LibTorch (TorchConfig.cmake) was not found" libtorch-dev libgloo-dev)
  endif()
  set(_colo_exec_why "LibTorch found")
  # A CUDA LibTorch (PyTorch's, on a GPU machine) lists its CUDA libraries: the executor and profiler
  # then run on CUDA tensors, NCCL process groups and the CUDA kernels.
  set(COLO_TORCH_CUDA OFF)
  if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
    set(COLO_TORCH_CUDA ON)
    set(_colo_exec_why "CUDA LibTorch found")
    # NCCL's header, which LibTorch does not ship: beside PyTorch's NCCL wheel, NCCL_HOME or the CUDA
    # toolkit. It must be the NCCL LibTorch was built with (the process group's options depend on it).
    execute_process(COMMAND python3 -c "import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], 'include'))"
                    OUTPUT_VARIABLE _colo_nccl_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    find_path(COLO_NCCL_INCLUDE_DIR nccl.h HINTS "${_colo_nccl_hint}" "$ENV{NCCL_HOME}/include" /usr/local/cuda/include)
    if(COLO_NCCL_INCLUDE_DIR)
      set(_colo_exec_why "CUDA LibTorch found, nccl.h in ${COLO_NCCL_INCLUDE_DIR}")
    else()
      message(WARNING "CUDA LibTorch found but no nccl.h: colo-run trains on one GPU; several GPUs (--backend nccl) "
                      "need COLO_NCCL_INCLUDE_DIR (pip's nvidia-nccl wheel has it)")
    endif()
  endif()
  # A LibTorch built with the old C++ ABI (older PyTorch wheels) needs it for every target: colo's
  # strings cross into LibTorch. The new ABI is GCC's default, so nothing is added for it.
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-D_GLIBCXX_USE_CXX11_ABI=0>)
  endif()
endif()

set(_colo_tests_why "not requested (-DCOLO_BUILD_TESTS=OFF)")
if(COLO_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    _colo_require(COLO_BUILD_TESTS "GoogleTest was not found" libgtest-dev)
  endif()
  set(_colo_tests_why "GoogleTest found")
endif()

# CUDA: AUTO builds the CUDA kernels where a CUDA compiler is found (nvcc on PATH, CUDACXX or
# /usr/local/cuda); CI asks for ON, so a machine without nvcc fails there instead of skipping them.
set(_colo_cuda_why "not requested (-DCOLO_WITH_CUDA=OFF)")
set(_colo_with_cuda OFF)
if(NOT COLO_WITH_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_colo_with_cuda ON)
    set(_colo_cuda_why "CUDA compiler ${CMAKE_CUDA_COMPILER}")
  elseif(COLO_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COLO_WITH_CUDA is ON but no CUDA compiler was found "
                        "(set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  else()
    set(_colo_cuda_why "no CUDA compiler (set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  endif()
endif()
if(_colo_with_cuda)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)  # CUDA::cudart for the kernels and their tests
endif()

function(_colo_describe name value why)
  set(_module_note "")
  if(ARGC GREATER 3)
    set(_module_note "${ARGV3}")
  endif()
  if(${value})
    message(STATUS "  ${name}: ON  (${why})${_module_note}")
  else()
    message(STATUS "  ${name}: OFF (${why})")
  endif()
endfunction()

function(colo_print_configuration)
  message(STATUS "colo ${PROJECT_VERSION} configuration:")
  set(_ui_note "")
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/ui/CMakeLists.txt)
    set(_ui_note "; the ui module has no code yet, nothing to build")
  endif()
  set(_exec_note "; builds the profiler and the executor (colo-profile, colo-run)")
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/executor/CMakeLists.txt)
    set(_exec_note "; builds the profiler (the executor module has no code yet)")
  endif()
  set(_cuda_note "; CUDA kernels for sm ${COLO_CUDA_ARCHITECTURES}")
  _colo_describe(COLO_BUILD_UI ${COLO_BUILD_UI} "${_colo_ui_why}" "${_ui_note}")
  _colo_describe(COLO_BUILD_EXECUTOR ${COLO_BUILD_EXECUTOR} "${_colo_exec_why}" "${_exec_note}")
  _colo_describe(COLO_WITH_CUDA ${_colo_with_cuda} "${_colo_cuda_why}" "${_cuda_note}")
  _colo_describe(COLO_BUILD_TESTS ${COLO_BUILD_TESTS} "${_colo_tests_why}")
  message(STATUS "  COLO_WERROR: ${COLO_WERROR}")
endfunction()
