// Informer against the fake API server: sync, live events, label filtering,
// re-watch from the last version after a dropped stream (no relist), relist
// with synthetic deletes after 410, bookmarks, list errors.
#include "operator/informer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "tests/operator/fake_api_client.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

std::string CmPath(const std::string& name) { return std::string(kConfigMaps) + "/" + name; }

// Records every callback as "add a", "update a v1->v2", "delete a".
class EventLog {
 public:
  ResourceEventHandlers Handlers() {
    return {.on_add = [this](const Json& o) { Push("add " + Name(o)); },
            .on_update =
                [this](const Json& old_object, const Json& o) {
                  Push("update " + Name(o) + " " + Value(old_object) + "->" + Value(o));
                },
            .on_delete = [this](const Json& o) { Push("delete " + Name(o)); }};
  }
  std::vector<std::string> events() {
    MutexLock lock(&mu_);
    return events_;
  }
  bool WaitFor(const std::string& event, absl::Duration timeout = absl::Seconds(15)) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return std::find(events_.begin(), events_.end(), event) != events_.end();
        },
        timeout);
  }
  void Clear() {
    MutexLock lock(&mu_);
    events_.clear();
  }

 private:
  static std::string Name(const Json& o) { return o["metadata"]["name"]; }
  static std::string Value(const Json& o) { return o.value("/data/key"_json_pointer, ""); }
  void Push(std::string e) {
    MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

class InformerTest : public FakeApiTest {
 protected:
  InformerTest() : FakeApiTest({.bookmark_interval = absl::Milliseconds(200)}) {}

  // Fast settings: short backoff, long watches unless a test wants otherwise.
  static InformerOptions FastOptions() {
    InformerOptions o;
    o.initial_backoff = absl::Milliseconds(50);
    o.max_backoff = absl::Milliseconds(200);
    o.min_watch_timeout = absl::Seconds(60);
    o.max_watch_timeout = absl::Seconds(60);
    return o;
  }

  std::unique_ptr<Informer> StartInformer(const std::string& selector = "",
                                          InformerOptions options = FastOptions()) {
    auto informer = std::make_unique<Informer>(client_.get(), kConfigMaps, selector, options);
    informer->AddEventHandler(log_.Handlers());
    informer->Start();
    EXPECT_TRUE(informer->WaitForSync(absl::Seconds(15)));
    return informer;
  }

  // LIST requests (not watches) on the configmaps collection.
  int CountLists() const {
    int n = 0;
    for (const auto& r : api_->Requests()) {
      if (r.method == "GET" && r.path == kConfigMaps && !absl::StrContains(r.query, "watch")) ++n;
    }
    return n;
  }
  int CountWatches() const {
    int n = 0;
    for (const auto& r : api_->Requests()) {
      if (r.path == kConfigMaps && absl::StrContains(r.query, "watch")) ++n;
    }
    return n;
  }

  EventLog log_;
};

TEST_F(InformerTest, SyncsThenDeliversAddsUpdatesAndDeletes) {
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("a", "1")));
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("b", "1")));
  auto informer = StartInformer();
  EXPECT_TRUE(informer->HasSynced());
  EXPECT_THAT(log_.events(), UnorderedElementsAre("add a", "add b"));
  EXPECT_EQ(informer->ListCached().size(), 2u);
  ASSERT_TRUE(informer->Get("default", "a").has_value());
  EXPECT_EQ((*informer->Get("default", "a"))["data"]["key"], "1");
  EXPECT_FALSE(informer->Get("default", "zz").has_value());
  EXPECT_FALSE(informer->Get("other", "a").has_value());

  log_.Clear();
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("c", "1")));
  ASSERT_TRUE(log_.WaitFor("add c"));
  SS_ASSERT_OK(client_->Patch(CmPath("a"), {{"data", {{"key", "2"}}}}));
  ASSERT_TRUE(log_.WaitFor("update a 1->2"));
  EXPECT_EQ((*informer->GetByKey("default/a"))["data"]["key"], "2");
  SS_ASSERT_OK(client_->Delete(CmPath("b")));
  ASSERT_TRUE(log_.WaitFor("delete b"));
  EXPECT_FALSE(informer->Get("default", "b").has_value());
  EXPECT_THAT(log_.events(), ElementsAre("add c", "update a 1->2", "delete b"));
  EXPECT_EQ(informer->last_resource_version(), absl::StrCat(api_->resource_version()));

  // The watch asked for bookmarks and a timeout in the configured range.
  bool ok_query = false;
  for (const auto& r : api_->Requests()) {
    if (absl::StrContains(r.query, "watch") &&
        absl::StrContains(r.query, "allowWatchBookmarks=true") &&
        absl::StrContains(r.query, "timeoutSeconds=60")) {
      ok_query = true;
    }
  }
  EXPECT_TRUE(ok_query);
  informer->Stop();
  informer->Stop();  // Idempotent.
}

TEST_F(InformerTest, LabelSelectorFiltersTheCache) {
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("mine", "1", {{"app", "x"}})));
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("theirs", "1", {{"app", "y"}})));
  auto informer = StartInformer("app=x");
  EXPECT_THAT(log_.events(), ElementsAre("add mine"));
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("mine2", "1", {{"app", "x"}})));
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("theirs2", "1", {{"app", "y"}})));
  ASSERT_TRUE(log_.WaitFor("add mine2"));
  EXPECT_THAT(log_.events(), Not(Contains("add theirs2")));
  EXPECT_EQ(informer->ListCached().size(), 2u);
}

TEST_F(InformerTest, DroppedWatchResumesFromLastVersionWithoutRelisting) {
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("a", "1")));
  auto informer = StartInformer();
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  ASSERT_EQ(CountLists(), 1);
  const int watches_before = CountWatches();
  api_->DropWatches();
  // Changes while (possibly) disconnected come from the watch replay.
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("b", "1")));
  SS_ASSERT_OK(api_->Delete(CmPath("a")));
  ASSERT_TRUE(log_.WaitFor("add b"));
  ASSERT_TRUE(log_.WaitFor("delete a"));
  EXPECT_TRUE(Eventually([&] { return CountWatches() > watches_before; }));
  EXPECT_EQ(CountLists(), 1);  // No second LIST.
  EXPECT_EQ(informer->stats().lists, 1);
  EXPECT_EQ(informer->stats().relists_after_expiry, 0);
  EXPECT_THAT(log_.events(), ElementsAre("add a", "add b", "delete a"));
}

TEST_F(InformerTest, ExpiredWatchRelistsAndDeliversWhatWasMissed) {
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("keep", "1")));
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("gone", "1")));
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("changed", "1")));
  auto informer = StartInformer();
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  log_.Clear();

  // Disconnect and keep the informer out (its re-watches fail) until the
  // changes have happened and the history is compacted.
  api_->InjectFault({.method = "WATCH", .code = 503, .times = 1000000});
  api_->ClearRequests();
  api_->DropWatches();
  ASSERT_TRUE(Eventually([&] {
    for (const auto& r : api_->Requests()) {
      if (absl::StrContains(r.query, "watch") && r.status == 503) return true;
    }
    return false;
  }));
  SS_ASSERT_OK(api_->Delete(CmPath("gone")));
  Json changed = *api_->Get(CmPath("changed"));
  changed["data"]["key"] = "2";
  SS_ASSERT_OK(api_->Update(CmPath("changed"), changed));
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("new", "1")));
  api_->Compact();
  api_->ClearFaults();

  ASSERT_TRUE(log_.WaitFor("delete gone"));
  ASSERT_TRUE(log_.WaitFor("update changed 1->2"));
  ASSERT_TRUE(log_.WaitFor("add new"));
  EXPECT_THAT(log_.events(), UnorderedElementsAre("delete gone", "update changed 1->2", "add new"));
  EXPECT_GE(informer->stats().relists_after_expiry, 1);
  EXPECT_EQ(informer->stats().lists, 2);
  std::vector<std::string> names;
  for (const Json& o : informer->ListCached()) names.push_back(o["metadata"]["name"]);
  EXPECT_THAT(names, ElementsAre("changed", "keep", "new"));  // By key.
  EXPECT_FALSE(informer->Get("default", "gone").has_value());

  // And it watches again after the relist.
  log_.Clear();
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("later")));
  ASSERT_TRUE(log_.WaitFor("add later"));
}

TEST_F(InformerTest, BookmarksAdvanceTheVersionWithoutEvents) {
  auto informer = StartInformer();
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(10)));
  const std::string synced_rv = informer->last_resource_version();
  // Writes to another collection move the global version.
  for (int i = 0; i < 3; ++i) {
    SS_ASSERT_OK(api_->Create("/api/v1/namespaces/default/secrets",
                              {{"apiVersion", "v1"},
                               {"kind", "Secret"},
                               {"metadata", {{"name", absl::StrCat("s", i)}}}}));
  }
  const std::string target = absl::StrCat(api_->resource_version());
  ASSERT_NE(target, synced_rv);
  EXPECT_TRUE(Eventually([&] { return informer->last_resource_version() == target; }));
  EXPECT_THAT(log_.events(), IsEmpty());

  // A re-watch now starts from the bookmark's version.
  api_->ClearRequests();
  api_->DropWatches();
  EXPECT_TRUE(Eventually([&] {
    for (const auto& r : api_->Requests()) {
      if (absl::StrContains(r.query, "watch") &&
          absl::StrContains(r.query, "resourceVersion=" + target)) {
        return true;
      }
    }
    return false;
  }));
  EXPECT_EQ(CountLists(), 0);
}

TEST_F(InformerTest, ServerTimeoutLeadsToAQuietRewatch) {
  InformerOptions options = FastOptions();
  options.min_watch_timeout = absl::Seconds(1);
  options.max_watch_timeout = absl::Seconds(2);
  auto informer = StartInformer("", options);
  EXPECT_TRUE(Eventually([&] { return informer->stats().watches >= 3; }, absl::Seconds(15)));
  EXPECT_EQ(informer->stats().lists, 1);
  for (const auto& r : api_->Requests()) {
    if (absl::StrContains(r.query, "watch")) {
      EXPECT_TRUE(absl::StrContains(r.query, "timeoutSeconds=1") ||
                  absl::StrContains(r.query, "timeoutSeconds=2"))
          << r.query;
    }
  }
  SS_ASSERT_OK(client_->Create(kConfigMaps, ConfigMap("x")));
  EXPECT_TRUE(log_.WaitFor("add x"));
}

TEST_F(InformerTest, ListErrorsBackOffAndRetry) {
  SS_ASSERT_OK(api_->Create(kConfigMaps, ConfigMap("a")));
  api_->InjectFault({.method = "GET", .path_contains = "/configmaps", .code = 500, .times = 2});
  Informer informer(client_.get(), kConfigMaps, "", FastOptions());
  informer.AddEventHandler(log_.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(15)));
  EXPECT_THAT(log_.events(), ElementsAre("add a"));
  EXPECT_EQ(informer.stats().lists, 1);
  EXPECT_EQ(CountLists(), 3);
}

TEST_F(InformerTest, StopBeforeSyncReturnsPromptly) {
  api_->InjectFault({.method = "GET", .code = 500, .times = 1000000});
  Informer informer(client_.get(), kConfigMaps, "", FastOptions());
  informer.Start();
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  informer.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(informer.HasSynced());
}

}  // namespace
}  // namespace shadowsync::kube
