# Target helpers: one function per kind of target, so every library, binary
# and test gets the same warnings, include root and sanitizer flags.

# Warnings and ISA flags, linked PRIVATE by every target we own.
add_library(shadowsync_build_flags INTERFACE)
target_compile_options(shadowsync_build_flags INTERFACE
  -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
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

# shadowsync_cc_test(NAME n SRCS ... DEPS ... [LABELS l ...] [TIMEOUT s])
# Tests are discovered per case at test time; LABELS select suites (unit,
# integration, slow) in scripts/test.sh and the sanitizer presets.
function(shadowsync_cc_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} shadowsync_test_util
                        GTest::gmock GTest::gtest_main shadowsync_build_flags)
  gtest_discover_tests(${A_NAME} DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
endfunction()
