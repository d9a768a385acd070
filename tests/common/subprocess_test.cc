#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::StatusIs;

// Waits for `pid`; its exit code, or -1 if a signal ended it.
int Wait(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Everything readable from `fd` until end of file; closes it.
std::string ReadToEnd(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST(SubprocessTest, RedirectsStdoutAndStderrToOneFileInOrder) {
  testing::ScratchDir dir;
  const std::string log = dir.File("child.log");
  testing::WriteFile(log, "before\n");
  absl::StatusOr<pid_t> pid = Spawn({"/bin/sh", "-c", "echo out; echo err >&2; echo out2; exit 3"},
                                    {.stdout_path = log, .stderr_path = log});
  SS_ASSERT_OK(pid);
  EXPECT_EQ(Wait(*pid), 3);
  EXPECT_EQ(testing::ReadFile(log), "before\nout\nerr\nout2\n");  // Appended.

  pid = Spawn({"/bin/sh", "-c", "echo again; echo apart >&2"},
              {.stdout_path = log, .stderr_path = dir.File("err.log"), .truncate_output = true});
  SS_ASSERT_OK(pid);
  EXPECT_EQ(Wait(*pid), 0);
  EXPECT_EQ(testing::ReadFile(log), "again\n");
  EXPECT_EQ(testing::ReadFile(dir.File("err.log")), "apart\n");
}

TEST(SubprocessTest, ReadsStdinFromAFileAndWritesStdoutToADescriptor) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.File("in"), "through cat\n");
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  absl::StatusOr<pid_t> pid = Spawn({"cat"}, {.stdin_path = dir.File("in"), .stdout_fd = fds[1]});
  close(fds[1]);
  SS_ASSERT_OK(pid);
  EXPECT_EQ(ReadToEnd(fds[0]), "through cat\n");
  EXPECT_EQ(Wait(*pid), 0);
}

TEST(SubprocessTest, TalksToAChildOverPipesOnBothStreams) {
  int in[2], out[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  absl::StatusOr<pid_t> pid = Spawn({"tr", "a-z", "A-Z"}, {.stdin_fd = in[0], .stdout_fd = out[1]});
  close(in[0]);
  close(out[1]);
  SS_ASSERT_OK(pid);
  ASSERT_EQ(write(in[1], "both ways\n", 10), 10);
  close(in[1]);
  EXPECT_EQ(ReadToEnd(out[0]), "BOTH WAYS\n");
  EXPECT_EQ(Wait(*pid), 0);
}

TEST(SubprocessTest, SetsEnvironmentVariablesOverThisProcesss) {
  testing::ScratchDir dir;
  const std::string out = dir.File("out");
  setenv("SS_SUBPROCESS_TEST_OLD", "old", 1);
  setenv("SS_SUBPROCESS_TEST_KEPT", "kept", 1);
  absl::StatusOr<pid_t> pid =
      Spawn({"/bin/sh", "-c",
             "echo $SS_SUBPROCESS_TEST_OLD $SS_SUBPROCESS_TEST_NEW $SS_SUBPROCESS_TEST_KEPT; "
             "env | grep -c ^SS_SUBPROCESS_TEST_OLD="},
            {.env = {"SS_SUBPROCESS_TEST_OLD=replaced", "SS_SUBPROCESS_TEST_NEW=new"},
             .stdout_path = out});
  SS_ASSERT_OK(pid);
  EXPECT_EQ(Wait(*pid), 0);
  EXPECT_EQ(testing::ReadFile(out), "replaced new kept\n1\n");
  unsetenv("SS_SUBPROCESS_TEST_OLD");
  unsetenv("SS_SUBPROCESS_TEST_KEPT");
}

TEST(SubprocessTest, FailsNamingAProgramThatCannotRun) {
  testing::ScratchDir dir;
  EXPECT_THAT(Spawn({"shadowsync-no-such-program"}),
              StatusIs(absl::StatusCode::kNotFound, "shadowsync-no-such-program"));
  const std::string missing = dir.File("missing");
  EXPECT_THAT(Spawn({missing}), StatusIs(absl::StatusCode::kUnavailable, missing));
  EXPECT_THAT(Spawn({missing}), StatusIs(absl::StatusCode::kUnavailable, "No such file"));
  testing::WriteFile(dir.File("not-executable"), "#!/bin/sh\n");
  EXPECT_THAT(Spawn({dir.File("not-executable")}),
              StatusIs(absl::StatusCode::kUnavailable, "Permission denied"));
  EXPECT_THAT(Spawn({"/bin/true"}, {.stdout_path = dir.File("no-dir/log")}),
              StatusIs(absl::StatusCode::kUnavailable, dir.File("no-dir/log")));
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a failed child was not reaped";
}

TEST(SubprocessTest, ANewProcessGroupIsTheChilds) {
  absl::StatusOr<pid_t> pid = Spawn({"sleep", "30"}, {.new_process_group = true});
  SS_ASSERT_OK(pid);
  EXPECT_EQ(getpgid(*pid), *pid);
  kill(-*pid, SIGKILL);
  EXPECT_EQ(Wait(*pid), -1);

  pid = Spawn({"sleep", "30"});
  SS_ASSERT_OK(pid);
  EXPECT_EQ(getpgid(*pid), getpgrp());
  kill(*pid, SIGKILL);
  Wait(*pid);
}

// A signal the spawning thread blocks is not blocked in the child.
TEST(SubprocessTest, TheChildStartsWithNoSignalsBlocked) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  absl::StatusOr<pid_t> pid = Spawn({"sleep", "30"});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  SS_ASSERT_OK(pid);
  kill(*pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
}

}  // namespace
}  // namespace shadowsync
