// MetricsHttpServer (common/metrics_http.h): /healthz, /metrics, and the stack
// of civetweb's threads, which lose every library's static thread-local
// storage from the 100 KB civetweb asks for.
#include "common/metrics_http.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "tests/util/http_get.h"

// Static thread-local storage as large as OpenBLAS's (60 KB), which with
// glog's 30 KB left civetweb's threads in `shadowsync` about 7 KB of stack:
// they overflowed as they started. Without the extra stack, 17 KB are left
// below Collect() here.
thread_local char g_large_thread_local[60 * 1024];

namespace shadowsync {
namespace {

// The smallest stack left below a /metrics scrape's Collect() on civetweb's
// threads.
class StackProbe : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    g_large_thread_local[0] = 1;  // Used, so that it stays in the binary.
    pthread_attr_t attr;
    void* low = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) {
      min_left_.store(0);  // Unknown: fails the test.
      return {};
    }
    pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    const char here = 0;
    const ptrdiff_t left = &here - static_cast<const char*>(low);
    ptrdiff_t seen = min_left_.load();
    while (left < seen && !min_left_.compare_exchange_weak(seen, left)) {
    }
    return {};
  }
  ptrdiff_t min_left() const { return min_left_.load(); }

 private:
  mutable std::atomic<ptrdiff_t> min_left_{PTRDIFF_MAX};
};

TEST(MetricsHttpServerTest, ServesHealthAndMetricsWithLargeThreadLocalStorage) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(http.ok()) << http.status();
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("test_requests_total")
      .Help("t")
      .Register(*registry)
      .Add({})
      .Increment();
  auto probe = std::make_shared<StackProbe>();
  (*http)->RegisterCollectable(registry);
  (*http)->RegisterCollectable(probe);
  const int port = (*http)->port();

  std::string body;
  EXPECT_EQ(testing::HttpGet(port, "/healthz", &body), 503);
  (*http)->set_serving(true);
  // Served on civetweb's threads, as many times as a few scrapes' worth.
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(testing::HttpGet(port, "/healthz", &body), 200) << i;
    EXPECT_EQ(body, "ok\n");
    ASSERT_EQ(testing::HttpGet(port, "/metrics", &body), 200) << i;
    EXPECT_NE(body.find("test_requests_total 1"), std::string::npos) << body;
  }
  // civetweb asks for 100 KB; its frames and prometheus-cpp's above Collect()
  // take about 21 KB of that.
  ASSERT_NE(probe->min_left(), PTRDIFF_MAX) << "no scrape reached the probe";
  EXPECT_GE(probe->min_left(), 64 * 1024);
}

// Every process's /metrics names the release it runs (CMake's project
// version), with nothing registered by the process itself.
TEST(MetricsHttpServerTest, EveryMetricsPageNamesTheRelease) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_THAT(std::string(kReleaseVersion), ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+.*"));
  std::string body;
  ASSERT_EQ(testing::HttpGet((*http)->port(), "/metrics", &body), 200);
  EXPECT_THAT(body, ::testing::HasSubstr("# TYPE shadowsync_build_info gauge"));
  EXPECT_THAT(body, ::testing::HasSubstr(absl::StrCat("shadowsync_build_info{version=\"",
                                                      std::string(kReleaseVersion), "\"} 1")));
}

// Each connection serves one request, and every response says so: an
// HTTP/1.1 client that is not told "Connection: close" reuses the socket the
// server has closed, and its next request fails (Node's fetch did, 6 times
// in 200). HEAD gets the headers alone.
TEST(MetricsHttpServerTest, EveryResponseSaysTheConnectionCloses) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(http.ok()) << http.status();
  (*http)->set_serving(true);
  for (const std::string path : {"/metrics", "/healthz", "/readyz", "/livez"}) {
    const std::string response = testing::HttpExchange(
        "127.0.0.1", (*http)->port(), "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
    EXPECT_THAT(response, ::testing::StartsWith("HTTP/1.1 200 OK\r\n")) << path;
    EXPECT_THAT(response, ::testing::HasSubstr("\r\nConnection: close\r\n")) << path;
  }
  const std::string head = testing::HttpExchange(
      "127.0.0.1", (*http)->port(), "HEAD /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_THAT(head, ::testing::ContainsRegex("Content-Length: [1-9][0-9]*\r\n"));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n")) << "a body after HEAD";
}

// A removed collectable leaves /metrics; one that is gone is skipped.
TEST(MetricsHttpServerTest, RemovedAndDestroyedCollectablesLeaveTheMetrics) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(http.ok()) << http.status();
  auto counter = [](const std::string& name) {
    auto registry = std::make_shared<prometheus::Registry>();
    prometheus::BuildCounter().Name(name).Help("t").Register(*registry).Add({}).Increment();
    return registry;
  };
  auto kept = counter("test_kept_total"), removed = counter("test_removed_total");
  auto destroyed = counter("test_destroyed_total");
  for (const auto& r : {kept, removed, destroyed}) (*http)->RegisterCollectable(r);
  std::string body;
  ASSERT_EQ(testing::HttpGet((*http)->port(), "/metrics", &body), 200);
  EXPECT_THAT(body, ::testing::HasSubstr("test_removed_total 1"));
  EXPECT_THAT(body, ::testing::HasSubstr("test_destroyed_total 1"));
  (*http)->RemoveCollectable(removed);
  destroyed.reset();
  ASSERT_EQ(testing::HttpGet((*http)->port(), "/metrics", &body), 200);
  EXPECT_THAT(body, ::testing::HasSubstr("test_kept_total 1"));
  EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr("test_removed_total")));
  EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr("test_destroyed_total")));
}

// Only civetweb's threads get the extra stack: every other caller of
// pthread_attr_setstacksize gets what it asks for.
TEST(MetricsHttpServerTest, OtherThreadsKeepTheStackSizeTheyAskFor) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
  size_t size = 0;
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  EXPECT_EQ(size, 256u * 1024);
  pthread_attr_destroy(&attr);
}

// /healthz and /readyz follow serving and ready; /livez only the health
// check, so a liveness probe spares a process that is starting or draining
// and restarts one whose check fails. A failing check turns all three to 503
// with its message, and they recover when it passes again.
TEST(MetricsHttpServerTest, TheHealthCheckDecidesLivezAndOverridesServing) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  std::string body;
  auto codes = [&] {
    return std::vector<int>{testing::HttpGet(port, "/healthz", &body),
                            testing::HttpGet(port, "/readyz", &body),
                            testing::HttpGet(port, "/livez", &body)};
  };
  EXPECT_EQ(codes(), (std::vector<int>{503, 503, 200})) << "starting";
  (*http)->set_serving(true);
  (*http)->set_ready(false);
  EXPECT_EQ(codes(), (std::vector<int>{200, 503, 200})) << "serving, not ready";
  (*http)->set_ready(true);
  EXPECT_EQ(codes(), (std::vector<int>{200, 200, 200}));

  std::atomic<bool> failed{true};
  (*http)->SetHealthCheck([&failed] {
    return failed.load() ? absl::UnavailableError("store failed: disk full") : absl::OkStatus();
  });
  for (const char* path : {"/healthz", "/readyz", "/livez"}) {
    EXPECT_EQ(testing::HttpGet(port, path, &body), 503) << path;
    EXPECT_EQ(body, "failed: store failed: disk full\n") << path;
  }
  failed = false;
  EXPECT_EQ(codes(), (std::vector<int>{200, 200, 200}));
  (*http)->set_serving(false);  // Draining.
  EXPECT_EQ(codes(), (std::vector<int>{503, 503, 200}));
  (*http)->SetHealthCheck(nullptr);
}

}  // namespace
}  // namespace shadowsync
