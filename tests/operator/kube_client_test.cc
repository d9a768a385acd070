// The KubeClient's pure parts: paths, keys, status mapping, watch framing,
// cancellation, RetryOnConflict. The HTTP paths are in
// kube_client_integration_test.cc.
#include "operator/kube_client.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {
namespace {

using ::shadowsync::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ResourcePathTest, BuildsCoreAndGroupPaths) {
  EXPECT_EQ((ResourcePath{"", "v1", "pods", "ml"}.ToString()), "/api/v1/namespaces/ml/pods");
  EXPECT_EQ((ResourcePath{"", "v1", "pods", "ml", "p-0"}.ToString()),
            "/api/v1/namespaces/ml/pods/p-0");
  EXPECT_EQ((ResourcePath{"apps", "v1", "statefulsets", "ml", "job-ps", "scale"}.ToString()),
            "/apis/apps/v1/namespaces/ml/statefulsets/job-ps/scale");
  EXPECT_EQ((ResourcePath{"apps", "v1", "statefulsets", "ml", "job-ps", "scale"}.Collection()),
            "/apis/apps/v1/namespaces/ml/statefulsets");
  EXPECT_EQ((ResourcePath{"", "v1", "namespaces", "", "ml"}.ToString()), "/api/v1/namespaces/ml");
  EXPECT_EQ((ResourcePath{"shadowsync.io", "v1alpha1", "shadowsyncjobs"}.ToString()),
            "/apis/shadowsync.io/v1alpha1/shadowsyncjobs");
  // A subresource needs a name.
  EXPECT_EQ((ResourcePath{"", "v1", "pods", "ml", "", "status"}.ToString()),
            "/api/v1/namespaces/ml/pods");
}

TEST(ObjectKeyTest, NamespacedAndClusterScoped) {
  const Json pod = {{"metadata", {{"namespace", "ml"}, {"name", "p-0"}, {"resourceVersion", "7"}}}};
  const Json ns = {{"metadata", {{"name", "ml"}}}};
  EXPECT_EQ(ObjectKey(pod), "ml/p-0");
  EXPECT_EQ(ObjectKey(ns), "ml");
  EXPECT_EQ(SplitObjectKey("ml/p-0"), (std::pair<std::string, std::string>{"ml", "p-0"}));
  EXPECT_EQ(SplitObjectKey("ml"), (std::pair<std::string, std::string>{"", "ml"}));
  EXPECT_EQ(ResourceVersionOf(pod), "7");
  EXPECT_EQ(ResourceVersionOf(ns), "");
  EXPECT_EQ(ObjectPath("/api/v1/namespaces/ml/pods", pod), "/api/v1/namespaces/ml/pods/p-0");
}

TEST(QueryEscapeTest, EscapesSelectorCharacters) {
  EXPECT_EQ(QueryEscape("app=x,tier!=db"), "app%3Dx%2Ctier%21%3Ddb");
  EXPECT_EQ(QueryEscape("env in (a b)"), "env%20in%20%28a%20b%29");
  EXPECT_EQ(QueryEscape("shadowsync.io/job-name_1~"), "shadowsync.io%2Fjob-name_1~");
}

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return Json{{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
              {"message", message}, {"reason", reason},   {"code", code}}
      .dump();
}

TEST(StatusFromHttpTest, MapsCodesAndNamesTheRequest) {
  const std::string path = "/api/v1/namespaces/ml/pods/p";
  const absl::Status not_found =
      StatusFromHttp("GET", path, 404, StatusBody(404, "NotFound", "pods \"p\" not found"));
  EXPECT_THAT(not_found, StatusIs(absl::StatusCode::kNotFound, "GET " + path));
  EXPECT_THAT(not_found, StatusIs(absl::StatusCode::kNotFound, "404"));
  EXPECT_THAT(not_found, StatusIs(absl::StatusCode::kNotFound, "pods \"p\" not found"));

  EXPECT_THAT(StatusFromHttp("POST", path, 409, StatusBody(409, "AlreadyExists", "exists")),
              StatusIs(absl::StatusCode::kAlreadyExists, "exists"));
  EXPECT_THAT(StatusFromHttp("PUT", path, 409, StatusBody(409, "Conflict", "modified")),
              StatusIs(absl::StatusCode::kAborted, "PUT"));
  EXPECT_THAT(StatusFromHttp("GET", path, 410, StatusBody(410, "Expired", "too old")),
              StatusIs(absl::StatusCode::kOutOfRange, "too old"));
  EXPECT_THAT(StatusFromHttp("POST", path, 422, StatusBody(422, "Invalid", "bad")),
              StatusIs(absl::StatusCode::kInvalidArgument, "Invalid"));
  EXPECT_THAT(StatusFromHttp("POST", path, 400, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(StatusFromHttp("GET", path, 401, ""),
              StatusIs(absl::StatusCode::kUnauthenticated, ""));
  EXPECT_THAT(StatusFromHttp("GET", path, 403, StatusBody(403, "Forbidden", "rbac")),
              StatusIs(absl::StatusCode::kPermissionDenied, "rbac"));
  EXPECT_THAT(StatusFromHttp("GET", path, 429, ""),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  EXPECT_THAT(StatusFromHttp("GET", path, 500, ""), StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_THAT(StatusFromHttp("GET", path, 503, ""), StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_THAT(StatusFromHttp("GET", path, 302, ""), StatusIs(absl::StatusCode::kUnknown, "302"));
  // A body that is not a Status is quoted.
  EXPECT_THAT(StatusFromHttp("GET", path, 502, "<html>bad gateway</html>"),
              StatusIs(absl::StatusCode::kUnavailable, "bad gateway"));
}

TEST(LineSplitterTest, KeepsThePartialTail) {
  LineSplitter s;
  EXPECT_THAT(s.Feed("{\"a\":1}\n{\"b\""), ElementsAre("{\"a\":1}"));
  EXPECT_EQ(s.tail(), "{\"b\"");
  EXPECT_THAT(s.Feed(":2"), IsEmpty());
  EXPECT_THAT(s.Feed("}\n"), ElementsAre("{\"b\":2}"));
  EXPECT_EQ(s.tail(), "");
  EXPECT_THAT(s.Feed("x\r\n\ny\nz"), ElementsAre("x", "y"));  // CRLF and blank lines.
  EXPECT_EQ(s.tail(), "z");
}

TEST(LineSplitterTest, ByteByByteEqualsWhole) {
  const std::string stream = "{\"type\":\"ADDED\"}\n{\"type\":\"BOOKMARK\"}\n{\"type\":\"DEL";
  LineSplitter whole;
  LineSplitter bytes;
  std::vector<std::string> from_bytes;
  for (const char c : stream) {
    for (std::string& line : bytes.Feed(std::string(1, c))) from_bytes.push_back(line);
  }
  EXPECT_EQ(whole.Feed(stream), from_bytes);
  EXPECT_EQ(whole.tail(), bytes.tail());
}

TEST(ParseWatchLineTest, DecodesEventsAndRefusesMalformedLines) {
  absl::StatusOr<WatchEvent> event =
      ParseWatchLine(R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->type, "ADDED");
  EXPECT_EQ(event->object["metadata"]["name"], "a");

  EXPECT_THAT(ParseWatchLine("{"), StatusIs(absl::StatusCode::kInvalidArgument, "not JSON"));
  EXPECT_THAT(ParseWatchLine("[1]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a JSON object"));
  // A non-string type once threw out of the watch loop.
  EXPECT_THAT(ParseWatchLine(R"({"type":5,"object":{}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "\"type\""));
  EXPECT_THAT(ParseWatchLine(R"({"type":"ADDED","object":"x"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "\"object\""));
  EXPECT_THAT(ParseWatchLine(R"({"type":"ADDED"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "\"object\""));
}

TEST(CancellationTest, RunsCallbacksOnceAndWakesSleepers) {
  Cancellation cancel;
  std::atomic<int> calls = 0;
  const int id = cancel.Register([&] { ++calls; });
  const int removed = cancel.Register([&] { calls += 100; });
  cancel.Unregister(removed);
  std::thread sleeper([&] { EXPECT_FALSE(cancel.SleepFor(absl::Hours(1))); });
  EXPECT_TRUE(Cancellation().SleepFor(absl::Milliseconds(1)));
  cancel.Cancel();
  cancel.Cancel();
  sleeper.join();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(cancel.cancelled());
  cancel.Unregister(id);
  // Registering after the fact runs at once.
  cancel.Register([&] { ++calls; });
  EXPECT_EQ(calls, 2);
}

TEST(RetryOnConflictTest, RetriesOnlyAborted) {
  int calls = 0;
  EXPECT_TRUE(RetryOnConflict([&] {
                return ++calls < 3 ? absl::AbortedError("conflict") : absl::OkStatus();
              }).ok());
  EXPECT_EQ(calls, 3);

  calls = 0;
  EXPECT_THAT(RetryOnConflict(
                  [&] {
                    ++calls;
                    return absl::AbortedError("conflict");
                  },
                  4),
              StatusIs(absl::StatusCode::kAborted, "conflict"));
  EXPECT_EQ(calls, 4);

  calls = 0;
  EXPECT_THAT(RetryOnConflict([&] {
                ++calls;
                return absl::NotFoundError("gone");
              }),
              StatusIs(absl::StatusCode::kNotFound, "gone"));
  EXPECT_EQ(calls, 1);
}

TEST(KubeClientTest, BadServerUrlIsInvalidArgument) {
  KubeConfig config;
  config.server = "ftp://k";
  EXPECT_THAT(KubeClient::FromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, "ftp://k"));
  config.server = "not a url";
  EXPECT_THAT(KubeClient::FromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a url"));
  config.server = "https://k:443";
  config.ca_file = "/nonexistent/ca.crt";
  EXPECT_THAT(KubeClient::FromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, "/nonexistent/ca.crt"));
}

TEST(KubeClientTest, NoServerIsUnavailable) {
  KubeConfig config;
  config.server = "http://127.0.0.1:1";  // Nothing listens on port 1.
  absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::FromConfig(config);
  SS_ASSERT_OK(client);
  EXPECT_THAT((*client)->Get("/api/v1/namespaces/default/pods/p"),
              StatusIs(absl::StatusCode::kUnavailable, "GET /api/v1/namespaces/default/pods/p"));
  EXPECT_THAT((*client)->Watch("/api/v1/pods", {}, [](const WatchEvent&) { return true; }),
              StatusIs(absl::StatusCode::kUnavailable, "WATCH"));
}

}  // namespace
}  // namespace shadowsync::kube
