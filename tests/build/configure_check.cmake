# Configures colo in a scratch folder with some packages hidden and checks that the configure stops
# (exit non-zero) and names the Debian packages to install: a promised part is never silently left out.
#
#   cmake -DSOURCE_DIR=... -DSCRATCH=... -DHIDE=Qt6 -DEXPECT="qt6-base-dev;qt6-charts-dev" -P configure_check.cmake
file(REMOVE_RECURSE "${SCRATCH}")
set(hide_args "")
foreach(package IN LISTS HIDE)
  list(APPEND hide_args "-DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON")
endforeach()
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${SCRATCH}" -G Ninja ${hide_args}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE "${SCRATCH}")
if(status EQUAL 0)
  message(FATAL_ERROR "configure with ${HIDE} hidden succeeded; it must stop and name the package\n${out}")
endif()
foreach(expected IN LISTS EXPECT)
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "configure with ${HIDE} hidden did not name ${expected}:\n${err}")
  endif()
endforeach()
message(STATUS "configure with ${HIDE} hidden stopped and named: ${EXPECT}")
