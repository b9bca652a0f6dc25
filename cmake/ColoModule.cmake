# One helper makes every module target, so every module is built the same way.
#
#   colo_add_module(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#
# creates the static library colo_<name> (alias colo::<name>) from <name>/src, with public headers in
# <name>/include/colo/<name>/. A module sees only the headers of the modules it links, so an include that
# goes against the dependency direction fails to compile.

function(colo_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wunused -Woverloaded-virtual)
  if(COLO_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

function(colo_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target colo_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(colo::${name} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_features(${target} PUBLIC cxx_std_23)
  colo_set_warnings(${target})
endfunction()

# colo_add_executable(<name> SOURCES ... DEPS ...): a program from app/.
function(colo_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  colo_set_warnings(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# colo_add_test_suite(<module> SOURCES ... DEPS ... [LABELS ...]): one GoogleTest executable per module,
# registered test by test with CTest. Tests find shipped data through COLO_SOURCE_DIR and programs
# through COLO_BIN_DIR.
function(colo_add_test_suite module)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  set(target colo_${module}_tests)
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${target} PRIVATE
    COLO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" COLO_BIN_DIR="${PROJECT_BINARY_DIR}/bin")
  colo_set_warnings(${target})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  include(GoogleTest)
  gtest_discover_tests(${target} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
