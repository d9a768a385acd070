#include "tests/util/json_line_process.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::testing {
namespace {

using ::testing::HasSubstr;

TEST(JsonLineProcessTest, EachRequestLineGetsTheLineThatAnswersIt) {
  // cat answers every request with itself.
  absl::StatusOr<std::unique_ptr<JsonLineProcess>> child = JsonLineProcess::Start({"cat"});
  SS_ASSERT_OK(child);
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json request = {{"op", "echo"}, {"n", i}, {"text", "a\nb"}};
    absl::StatusOr<nlohmann::json> reply = (*child)->Call(request);
    SS_ASSERT_OK(reply);
    EXPECT_EQ(*reply, request);
  }
}

TEST(JsonLineProcessTest, AChildThatExitsOrAnswersNoJsonIsAnErrorNotACrash) {
  absl::StatusOr<std::unique_ptr<JsonLineProcess>> gone = JsonLineProcess::Start({"true"});
  SS_ASSERT_OK(gone);
  absl::Status s = (*gone)->Call({{"op", "x"}}).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  absl::StatusOr<std::unique_ptr<JsonLineProcess>> prose =
      JsonLineProcess::Start({"/bin/sh", "-c", "read line; echo not json"});
  SS_ASSERT_OK(prose);
  s = (*prose)->Call({{"op", "x"}}).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("answered with no JSON: not json"));
  EXPECT_TRUE(absl::IsNotFound(JsonLineProcess::Start({"no-such-program-here"}).status()));
}

// A validator that cannot answer fails the write that needed it, naming why,
// instead of letting the CRD or its objects through unvalidated.
TEST(JsonLineProcessTest, TheFakeApiServerRefusesWritesItsValidatorCannotCheck) {
  absl::StatusOr<std::unique_ptr<FakeKubeApiServer>> api =
      FakeKubeApiServer::Start({.crd_validator = {"true"}});
  SS_ASSERT_OK(api);
  absl::Status s = (*api)->ApplyFile(SourcePath("deploy/crd.yaml"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("true exited"));  // Before or after the write.
}

}  // namespace
}  // namespace shadowsync::testing
