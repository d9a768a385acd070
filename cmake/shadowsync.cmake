# Target helpers: one function per kind of target, so every library, binary
# and test gets the same warnings, include root and sanitizer flags.

# Warnings and ISA flags, linked PRIVATE by every target we own.
add_library(shadowsync_build_flags INTERFACE)
# -fno-math-errno: no caller reads errno after sqrt, and without it GCC keeps
# sqrt scalar (with an errno branch), which left the optimizer's update loops
# unvectorised. Results are unchanged: sqrt is correctly rounded either way.
target_compile_options(shadowsync_build_flags INTERFACE
  -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -fno-math-errno
  $<$<BOOL:${SHADOWSYNC_MARCH}>:-march=${SHADOWSYNC_MARCH}>)
# cpprestsdk's macro U breaks GoogleTest and absl; turn it off everywhere.
target_compile_definitions(shadowsync_build_flags INTERFACE _TURN_OFF_PLATFORM_STRING)

# shadowsync_cc_library(NAME n SRCS ... DEPS ...) -> target shadowsync_n, alias shadowsync::n
function(shadowsync_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(shadowsync_${A_NAME} ${A_SRCS})
  add_library(shadowsync::${A_NAME} ALIAS shadowsync_${A_NAME})
  target_include_directories(shadowsync_${A_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>)
  target_link_libraries(shadowsync_${A_NAME} PUBLIC ${A_DEPS} PRIVATE shadowsync_build_flags)
endfunction()

# shadowsync_cc_binary(NAME n SRCS ... DEPS ...) -> bin/n
function(shadowsync_cc_binary)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} shadowsync_build_flags)
endfunction()

# shadowsync_cc_test(NAME n SRCS ... DEPS ... [LABEL unit|integration] [TIMEOUT s])
# Tests are discovered per case at test time. One label per test (the
# discovery script cannot carry a list): `ctest -L unit` runs the fast suites.
function(shadowsync_cc_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT;LABEL" "SRCS;DEPS" ${ARGN})
  if(NOT A_LABEL)
    set(A_LABEL unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} shadowsync_test_util
                        GTest::gmock GTest::gtest_main shadowsync_build_flags)
  gtest_discover_tests(${A_NAME} DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS ${A_LABEL} TIMEOUT ${A_TIMEOUT})
endfunction()
