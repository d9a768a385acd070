# The container image (issue 8, docs/container.md). No Docker engine here, so
# dockerfile_test.sh checks the Dockerfile statically: the runtime stage's
# package list against `ldd` of the built shadowsync (dpkg -S), no build tools
# at runtime, the stages, user, volume and entrypoint, and dockerfilelint.
# Run alone: ctest --preset release -L docker
add_test(NAME dockerfile
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dockerfile_test.sh ${CMAKE_BINARY_DIR}/bin
                 ${PROJECT_SOURCE_DIR})
# apt-cache re-reads the package lists on each of its two calls: seconds on a busy machine.
set_tests_properties(dockerfile PROPERTIES LABELS "docker;deploy" TIMEOUT 120)
