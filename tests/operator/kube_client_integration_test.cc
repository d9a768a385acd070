// KubeClient over real HTTP against the in-process fake API server: CRUD,
// error mapping, fault injection and recovery, watch delivery, timeout,
// 410, bookmarks, cancellation, token reload.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "tests/operator/fake_api_client.h"
#include "tests/operator/kubeconfig_yaml.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {
namespace {

using ::shadowsync::testing::FakeKubeApiServer;
using ::shadowsync::testing::FakeKubeApiServerOptions;
using ::shadowsync::testing::FakeKubeFault;
using ::shadowsync::testing::ScratchDir;
using ::shadowsync::testing::StatusIs;
using ::shadowsync::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kStatefulSets[] = "/apis/apps/v1/namespaces/default/statefulsets";

Json StatefulSet(const std::string& name, int replicas) {
  Json sts = Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "spec": {"selector": {"matchLabels": {}},
             "template": {"metadata": {"labels": {}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})");
  sts["metadata"]["name"] = name;
  sts["spec"]["replicas"] = replicas;
  sts["spec"]["serviceName"] = name;
  sts["spec"]["selector"]["matchLabels"]["app"] = name;
  sts["spec"]["template"]["metadata"]["labels"]["app"] = name;
  return sts;
}

class KubeClientIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}); }

  void StartServer(FakeKubeApiServerOptions options) {
    auto api = FakeKubeApiServer::Start(options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    const std::string kubeconfig = dir_.File("kubeconfig");
    SS_ASSERT_OK(api_->WriteKubeconfig(kubeconfig));
    auto config = LoadKubeconfig(kubeconfig);
    SS_ASSERT_OK(config);
    config_ = *config;
    client_ = NewClient({});
  }

  std::unique_ptr<KubeClient> NewClient(KubeClientOptions options) {
    auto client = KubeClient::FromConfig(config_, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  ScratchDir dir_;
  std::unique_ptr<FakeKubeApiServer> api_;
  KubeConfig config_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(KubeClientIntegrationTest, CrudRoundTripWithOptimisticConcurrency) {
  absl::StatusOr<Json> created = client_->Create(kConfigMaps, ConfigMap("a", "1"));
  SS_ASSERT_OK(created);
  const std::string path = ObjectPath(kConfigMaps, *created);
  EXPECT_EQ(path, std::string(kConfigMaps) + "/a");
  EXPECT_FALSE(ResourceVersionOf(*created).empty());
  EXPECT_EQ((*created)["metadata"]["namespace"], "default");

  absl::StatusOr<Json> got = client_->Get(path);
  SS_ASSERT_OK(got);
  EXPECT_EQ((*got)["data"]["key"], "1");

  Json changed = *got;
  changed["data"]["key"] = "2";
  absl::StatusOr<Json> updated = client_->Update(path, changed);
  SS_ASSERT_OK(updated);
  EXPECT_NE(ResourceVersionOf(*updated), ResourceVersionOf(*got));

  // The same stale object again: 409 Conflict -> Aborted, naming the request.
  changed["data"]["key"] = "3";
  EXPECT_THAT(client_->Update(path, changed), StatusIs(absl::StatusCode::kAborted, "PUT " + path));
  EXPECT_THAT(client_->Update(path, changed), StatusIs(absl::StatusCode::kAborted, "409"));
  EXPECT_THAT(client_->Create(kConfigMaps, ConfigMap("a")),
              StatusIs(absl::StatusCode::kAlreadyExists, "POST"));

  absl::StatusOr<Json> merged =
      client_->Patch(path, {{"data", {{"extra", "x"}}}}, PatchType::kMerge);
  SS_ASSERT_OK(merged);
  EXPECT_EQ((*merged)["data"]["key"], "2");
  EXPECT_EQ((*merged)["data"]["extra"], "x");
  absl::StatusOr<Json> json_patched = client_->Patch(
      path, Json::array({{{"op", "replace"}, {"path", "/data/key"}, {"value", "4"}}}),
      PatchType::kJsonPatch);
  SS_ASSERT_OK(json_patched);
  EXPECT_EQ((*json_patched)["data"]["key"], "4");
  // A failing JSON-patch "test" precondition is rejected by the server.
  EXPECT_FALSE(client_
                   ->Patch(path,
                           Json::array({{{"op", "test"}, {"path", "/data/key"}, {"value", "no"}}}),
                           PatchType::kJsonPatch)
                   .ok());

  SS_EXPECT_OK(client_->Delete(path));
  EXPECT_THAT(client_->Get(path), StatusIs(absl::StatusCode::kNotFound, "GET " + path));
  EXPECT_THAT(client_->Delete(path), StatusIs(absl::StatusCode::kNotFound, "DELETE"));
  EXPECT_THAT(client_->Create("/api/v1/namespaces/missing/configmaps", ConfigMap("b")),
              StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_F(KubeClientIntegrationTest, StatusAndScaleSubresources) {
  SS_ASSERT_OK(client_->Create(kStatefulSets, StatefulSet("job-ps", 2)));
  const std::string path = std::string(kStatefulSets) + "/job-ps";
  absl::StatusOr<Json> sts = client_->Get(path);
  SS_ASSERT_OK(sts);

  Json with_status = *sts;
  with_status["status"] = {{"replicas", 2}, {"readyReplicas", 1}};
  absl::StatusOr<Json> updated = client_->UpdateStatus(path, with_status);
  SS_ASSERT_OK(updated);
  EXPECT_EQ((*updated)["status"]["readyReplicas"], 1);

  absl::StatusOr<Json> patched = client_->PatchStatus(path, {{"status", {{"readyReplicas", 2}}}});
  SS_ASSERT_OK(patched);
  EXPECT_EQ((*patched)["status"]["readyReplicas"], 2);
  EXPECT_EQ((*patched)["spec"]["replicas"], 2);

  absl::StatusOr<Json> scale = client_->GetScale(path);
  SS_ASSERT_OK(scale);
  EXPECT_EQ((*scale)["spec"]["replicas"], 2);
  (*scale)["spec"]["replicas"] = 3;
  SS_ASSERT_OK(client_->UpdateScale(path, *scale));
  EXPECT_EQ((*client_->Get(path))["spec"]["replicas"], 3);
}

TEST_F(KubeClientIntegrationTest, ListFiltersByLabelAndJoinsPages) {
  for (int i = 0; i < 5; ++i) {
    SS_ASSERT_OK(client_->Create(
        kConfigMaps, ConfigMap(absl::StrCat("cm-", i), "v", {{"parity", i % 2 ? "odd" : "even"}})));
  }
  ListOptions options;
  options.limit = 2;  // Three pages.
  absl::StatusOr<ListResult> all = client_->List(kConfigMaps, options);
  SS_ASSERT_OK(all);
  EXPECT_EQ(all->items.size(), 5u);
  EXPECT_FALSE(all->resource_version.empty());

  options.label_selector = "parity=odd";
  absl::StatusOr<ListResult> odd = client_->List(kConfigMaps, options);
  SS_ASSERT_OK(odd);
  std::vector<std::string> names;
  for (const Json& item : odd->items) names.push_back(item["metadata"]["name"]);
  EXPECT_THAT(names, UnorderedElementsAre("cm-1", "cm-3"));

  // The selector reached the server URL-encoded.
  bool saw_selector = false;
  for (const auto& r : api_->Requests()) {
    if (absl::StrContains(r.query, "labelSelector=parity%3Dodd")) saw_selector = true;
  }
  EXPECT_TRUE(saw_selector);
}

TEST_F(KubeClientIntegrationTest, InjectedFaultsMapAndTheClientRecovers) {
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("a")));
  const std::string path = std::string(kConfigMaps) + "/a";
  api_->InjectFault({.method = "GET", .path_contains = "/configmaps/a", .code = 503, .times = 2});
  EXPECT_THAT(client_->Get(path), StatusIs(absl::StatusCode::kUnavailable, "503"));
  EXPECT_THAT(client_->Get(path), StatusIs(absl::StatusCode::kUnavailable, "GET " + path));
  SS_EXPECT_OK(client_->Get(path));

  api_->InjectFault({.method = "PUT", .code = 429});
  EXPECT_THAT(client_->Update(path, ConfigMap("a")),
              StatusIs(absl::StatusCode::kResourceExhausted, "429"));
  api_->InjectFault({.method = "DELETE", .code = 403});
  EXPECT_THAT(client_->Delete(path), StatusIs(absl::StatusCode::kPermissionDenied, "403"));
  api_->InjectFault({.method = "POST", .code = 401});
  EXPECT_THAT(client_->Create(kConfigMaps, ConfigMap("b")),
              StatusIs(absl::StatusCode::kUnauthenticated, "401"));
  api_->InjectFault({.method = "PATCH", .code = 422});
  EXPECT_THAT(client_->Patch(path, {{"data", {{"k", "v"}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "422"));
  SS_EXPECT_OK(client_->Delete(path));
}

TEST_F(KubeClientIntegrationTest, SlowServerTimesOutAsUnavailableThenRecovers) {
  KubeClientOptions options;
  options.request_timeout = absl::Seconds(1);
  std::unique_ptr<KubeClient> client = NewClient(options);
  SS_ASSERT_OK(client->Create(kConfigMaps, ConfigMap("a")));
  // Two delays: cpprestsdk may silently resend a request once when its
  // pooled (reused) connection fails before the status line; whether a
  // timeout counts depends on which error the aborted read reports.
  api_->InjectFault({.method = "GET", .code = 0, .times = 2, .delay = absl::Seconds(5)});
  const absl::Time start = absl::Now();
  EXPECT_THAT(client->Get(std::string(kConfigMaps) + "/a"),
              StatusIs(absl::StatusCode::kUnavailable, "GET"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(3500));
  // The next call goes through on a fresh connection (the second delay may
  // not have been used).
  api_->ClearFaults();
  SS_EXPECT_OK(client->Get(std::string(kConfigMaps) + "/a"));
}

TEST_F(KubeClientIntegrationTest, ServerGoneIsUnavailable) {
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("a")));
  api_.reset();
  EXPECT_THAT(client_->Get(std::string(kConfigMaps) + "/a"),
              StatusIs(absl::StatusCode::kUnavailable, "GET"));
}

// Runs a Watch on a thread, collecting events until `stop_after` arrived.
class WatchRecorder {
 public:
  WatchRecorder(KubeClient* client, std::string path, WatchOptions options, size_t stop_after = 0)
      : thread_([=, this] {
          result_ = client->Watch(
              path, options,
              [this, stop_after](const WatchEvent& e) {
                MutexLock lock(&mu_);
                events_.push_back(e);
                return stop_after == 0 || events_.size() < stop_after;
              },
              &cancel_);
          MutexLock lock(&mu_);
          done_ = true;
        }) {}
  ~WatchRecorder() {
    cancel_.Cancel();
    thread_.join();
  }

  // Waits until `pred(events)` holds.
  bool WaitFor(const std::function<bool(const std::vector<WatchEvent>&)>& pred,
               absl::Duration timeout = absl::Seconds(10)) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pred(events_); },
                                timeout);
  }
  bool WaitDone(absl::Duration timeout = absl::Seconds(10)) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; },
                                timeout);
  }
  std::vector<WatchEvent> events() {
    MutexLock lock(&mu_);
    return events_;
  }
  absl::Status result() {
    WaitDone();
    MutexLock lock(&mu_);
    return result_;
  }
  Cancellation& cancel() { return cancel_; }

 private:
  Cancellation cancel_;
  Mutex mu_;
  std::vector<WatchEvent> events_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_;  // Written before done_, read after.
  std::thread thread_;
};

std::vector<std::string> Types(const std::vector<WatchEvent>& events, bool skip_bookmarks = true) {
  std::vector<std::string> types;
  for (const WatchEvent& e : events) {
    if (skip_bookmarks && e.type == "BOOKMARK") continue;
    types.push_back(e.type + " " + e.object.value("/metadata/name"_json_pointer, ""));
  }
  return types;
}

TEST_F(KubeClientIntegrationTest, WatchDeliversChangesAfterTheListVersion) {
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("before")));
  absl::StatusOr<ListResult> list = client_->List(kConfigMaps);
  SS_ASSERT_OK(list);

  WatchOptions options;
  options.resource_version = list->resource_version;
  options.allow_bookmarks = false;
  WatchRecorder watch(client_.get(), kConfigMaps, options, /*stop_after=*/3);
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("x")));
  SS_ASSERT_OK(client_->Patch(std::string(kConfigMaps) + "/x", {{"data", {{"key", "2"}}}}));
  SS_ASSERT_OK(client_->Delete(std::string(kConfigMaps) + "/x"));
  SS_EXPECT_OK(watch.result());  // on_event returned false after 3.
  const std::vector<WatchEvent> events = watch.events();
  EXPECT_THAT(Types(events), ElementsAre("ADDED x", "MODIFIED x", "DELETED x"));
  EXPECT_EQ(events[1].object["data"]["key"], "2");
}

TEST_F(KubeClientIntegrationTest, WatchEndsCleanlyAtTimeoutSeconds) {
  WatchOptions options;
  options.resource_version = absl::StrCat(api_->resource_version());
  options.timeout_seconds = 1;
  const absl::Time start = absl::Now();
  WatchRecorder watch(client_.get(), kConfigMaps, options);
  SS_EXPECT_OK(watch.result());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  bool sent_timeout = false;
  for (const auto& r : api_->Requests()) {
    if (absl::StrContains(r.query, "timeoutSeconds=1")) sent_timeout = true;
  }
  EXPECT_TRUE(sent_timeout);
}

TEST_F(KubeClientIntegrationTest, QuietWatchOutlivesTheShortRequestTimeout) {
  // The ordinary calls' idle timeout is 300 ms, the watch runs 2 s without
  // events: its own client must not cut it.
  KubeClientOptions client_options;
  client_options.request_timeout = absl::Milliseconds(300);
  client_options.watch_timeout_margin = absl::Seconds(5);
  std::unique_ptr<KubeClient> client = NewClient(client_options);
  WatchOptions options;
  options.resource_version = absl::StrCat(api_->resource_version());
  options.timeout_seconds = 2;
  options.allow_bookmarks = false;
  const absl::Time start = absl::Now();
  WatchRecorder watch(client.get(), kConfigMaps, options);
  SS_EXPECT_OK(watch.result());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1900));
}

TEST_F(KubeClientIntegrationTest, WatchFromCompactedVersionIsOutOfRange) {
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("a")));
  const std::string old_rv = absl::StrCat(api_->resource_version());
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("b")));
  api_->Compact();
  WatchOptions options;
  options.resource_version = old_rv;
  WatchRecorder watch(client_.get(), kConfigMaps, options);
  EXPECT_THAT(watch.result(), StatusIs(absl::StatusCode::kOutOfRange, "410"));
  EXPECT_THAT(Types(watch.events()), ElementsAre());
}

TEST_F(KubeClientIntegrationTest, BookmarksCarryTheCurrentVersion) {
  FakeKubeApiServerOptions server_options;
  server_options.bookmark_interval = absl::Milliseconds(100);
  StartServer(server_options);
  WatchOptions options;
  options.resource_version = absl::StrCat(api_->resource_version());
  WatchRecorder watch(client_.get(), kConfigMaps, options);
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  // A change elsewhere moves the global version; only a bookmark tells us.
  SS_ASSERT_OK(
      client_->Create("/api/v1/namespaces/default/secrets",
                      {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}}));
  const std::string now_rv = absl::StrCat(api_->resource_version());
  EXPECT_TRUE(watch.WaitFor([&](const std::vector<WatchEvent>& events) {
    for (const WatchEvent& e : events) {
      if (e.type == "BOOKMARK" && ResourceVersionOf(e.object) == now_rv) return true;
    }
    return false;
  }));
  EXPECT_THAT(Types(watch.events()), ElementsAre());  // Nothing but bookmarks.
}

TEST_F(KubeClientIntegrationTest, WatchIsCancellableFromAnotherThread) {
  WatchOptions options;
  options.resource_version = absl::StrCat(api_->resource_version());
  WatchRecorder watch(client_.get(), kConfigMaps, options);
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  const absl::Time start = absl::Now();
  watch.cancel().Cancel();
  EXPECT_THAT(watch.result(), StatusIs(absl::StatusCode::kCancelled, "WATCH"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(KubeClientIntegrationTest, WatchCancelledBeforeItStartsReturnsAtOnce) {
  Cancellation cancel;
  cancel.Cancel();
  EXPECT_THAT(client_->Watch(
                  kConfigMaps, {}, [](const WatchEvent&) { return true; }, &cancel),
              StatusIs(absl::StatusCode::kCancelled, ""));
}

TEST_F(KubeClientIntegrationTest, DroppedWatchReturnsAndFaultsMap) {
  WatchOptions options;
  options.resource_version = absl::StrCat(api_->resource_version());
  {
    WatchRecorder watch(client_.get(), kConfigMaps, options);
    ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
    api_->DropWatches();
    ASSERT_TRUE(watch.WaitDone(absl::Seconds(5)));
    const absl::Status s = watch.result();
    // An abrupt close is a broken stream; either way the caller re-watches.
    EXPECT_TRUE(s.ok() || absl::IsUnavailable(s)) << s;
  }
  api_->InjectFault({.method = "WATCH", .code = 500});
  EXPECT_THAT(client_->Watch(kConfigMaps, options, [](const WatchEvent&) { return true; }),
              StatusIs(absl::StatusCode::kUnavailable, "500"));
}

TEST_F(KubeClientIntegrationTest, RetryOnConflictRereadsAndWins) {
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("a", "0")));
  const std::string path = std::string(kConfigMaps) + "/a";
  int attempts = 0;
  SS_EXPECT_OK(RetryOnConflict([&]() -> absl::Status {
    SS_ASSIGN_OR_RETURN(Json cm, client_->Get(path));
    if (++attempts == 1) {
      // Another writer sneaks in between our read and write.
      Json other = cm;
      other["data"]["key"] = "other";
      SS_RETURN_IF_ERROR(api_->Update(path, other).status());
    }
    cm["data"]["key"] = cm["data"]["key"].get<std::string>() + "+mine";
    return client_->Update(path, cm).status();
  }));
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ((*client_->Get(path))["data"]["key"], "other+mine");
}

TEST_F(KubeClientIntegrationTest, RotatedTokenFileIsPickedUp) {
  // The fake does not expose request headers, so this checks the wiring:
  // the client's token source is the kubeconfig's file, re-read per period,
  // and requests keep working across a rotation.
  const std::string token = dir_.File("token");
  WriteFile(token, "token-1\n");
  const std::string kubeconfig = dir_.File("kubeconfig-tokenfile");
  WriteFile(kubeconfig, OneContextKubeconfig("server: '" + api_->url() + "'", "tokenFile: token"));
  KubeConfigOptions config_options;
  config_options.token_reload_period = absl::Milliseconds(50);
  absl::StatusOr<KubeConfig> config = LoadKubeconfig(kubeconfig, "", config_options);
  SS_ASSERT_OK(config);
  absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::FromConfig(*config);
  SS_ASSERT_OK(client);
  SS_EXPECT_OK((*client)->List(kConfigMaps));
  EXPECT_EQ((*client)->config().token->Token(), "token-1");
  WriteFile(token, "token-2\n");
  absl::SleepFor(absl::Milliseconds(60));
  SS_EXPECT_OK((*client)->List(kConfigMaps));
  EXPECT_EQ((*client)->config().token->Token(), "token-2");
}

}  // namespace
}  // namespace shadowsync::kube
