// Tests of the fake Kubernetes API server over real HTTP on loopback: a tiny
// socket client (which can tell a clean end of a chunked stream from a cut
// connection) for most cases, and cpprestsdk's http_client — the operator's
// client — for streamed watches.
#include "tests/util/fake_kube_apiserver.h"

#include <arpa/inet.h>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/util/test_util.h"

namespace shadowsync::testing {
namespace {

using json = nlohmann::json;

constexpr char kCms[] = "/api/v1/namespaces/default/configmaps";
constexpr char kSts[] = "/apis/apps/v1/namespaces/default/statefulsets";
constexpr char kPods[] = "/api/v1/namespaces/default/pods";
constexpr char kCrds[] = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
constexpr char kJobs[] = "/apis/test.shadowsync.io/v1alpha1/namespaces/default/testjobs";

// --- a tiny HTTP/1.1 client ------------------------------------------------

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A buffered reader over a socket with deadlines.
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {}
  // False on EOF, error or deadline (timed_out() tells which).
  bool Fill(absl::Time deadline) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) {
      timed_out_ = true;
      return false;
    }
    char tmp[8192];
    const ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool Line(std::string* line, absl::Time deadline) {
    size_t end;
    while ((end = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return false;
    }
    *line = buf_.substr(0, end);
    buf_.erase(0, end + 2);
    return true;
  }
  bool Exact(size_t n, std::string* out, absl::Time deadline) {
    while (buf_.size() < n) {
      if (!Fill(deadline)) return false;
    }
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }
  bool timed_out() const { return timed_out_; }
  void reset_timeout() { timed_out_ = false; }

 private:
  int fd_;
  std::string buf_;
  bool timed_out_ = false;
};

struct Response {
  int code = -1;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  json Json() const { return json::parse(body, nullptr, false); }
};

bool ReadHead(Reader& r, Response* resp, absl::Time deadline) {
  std::string line;
  if (!r.Line(&line, deadline) || line.size() < 12) return false;
  resp->code = std::stoi(line.substr(9, 3));
  while (r.Line(&line, deadline) && !line.empty()) {
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    resp->headers[name] = line.substr(colon + 2);
  }
  return true;
}

std::string RequestText(const std::string& method, const std::string& target,
                        const std::string& body, const std::string& content_type,
                        const std::string& accept) {
  std::string req = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  if (!accept.empty()) absl::StrAppend(&req, "Accept: ", accept, "\r\n");
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    absl::StrAppend(&req, "Content-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                    "\r\n");
  }
  absl::StrAppend(&req, "\r\n", body);
  return req;
}

bool ReadBody(Reader& r, Response* resp, absl::Time deadline) {
  if (resp->headers["transfer-encoding"] == "chunked") {
    std::string line;
    while (r.Line(&line, deadline)) {
      size_t n = 0;
      if (!absl::SimpleHexAtoi(line, &n)) return false;
      if (n == 0) return r.Line(&line, deadline);
      std::string chunk;
      if (!r.Exact(n, &chunk, deadline) || !r.Line(&line, deadline)) return false;
      resp->body += chunk;
    }
    return false;
  }
  size_t n = 0;
  if (!absl::SimpleAtoi(resp->headers["content-length"], &n)) return false;
  return r.Exact(n, &resp->body, deadline);
}

// One request on a fresh connection, with `token` as its bearer token
// unless empty.
Response Do(int port, const std::string& method, const std::string& target,
            const std::string& body = "", const std::string& content_type = "application/json",
            const std::string& accept = "application/json", const std::string& token = "") {
  Response resp;
  const int fd = Connect(port);
  if (fd < 0) return resp;
  std::string req = RequestText(method, target, body, content_type, accept);
  if (!token.empty()) {
    req.insert(req.find("\r\n") + 2, absl::StrCat("Authorization: Bearer ", token, "\r\n"));
  }
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    Reader r(fd);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    if (!ReadHead(r, &resp, deadline) || !ReadBody(r, &resp, deadline)) resp.code = -1;
  }
  close(fd);
  return resp;
}

// A watch stream read event by event.
class Watch {
 public:
  enum class Next { kEvent, kTimeout, kCleanEnd, kCut };

  Watch(int port, const std::string& target) : fd_(Connect(port)), reader_(fd_) {
    const std::string req = RequestText("GET", target, "", "", "application/json");
    send(fd_, req.data(), req.size(), MSG_NOSIGNAL);
    ReadHead(reader_, &head_, absl::Now() + absl::Seconds(10));
  }
  ~Watch() { close(fd_); }

  int code() const { return head_.code; }
  const Response& head() const { return head_; }

  // The next event within `timeout`.
  Next Read(json* event, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    reader_.reset_timeout();
    size_t nl;
    while ((nl = pending_.find('\n')) == std::string::npos) {
      if (ended_) return Next::kCleanEnd;
      std::string line;
      if (!reader_.Line(&line, deadline)) return reader_.timed_out() ? Next::kTimeout : Next::kCut;
      size_t n = 0;
      if (!absl::SimpleHexAtoi(line, &n)) return Next::kCut;
      if (n == 0) {
        ended_ = true;
        continue;
      }
      std::string chunk;
      if (!reader_.Exact(n, &chunk, deadline) || !reader_.Line(&line, deadline)) {
        return reader_.timed_out() ? Next::kTimeout : Next::kCut;
      }
      pending_ += chunk;
    }
    *event = json::parse(pending_.substr(0, nl));
    pending_.erase(0, nl + 1);
    return Next::kEvent;
  }

  // The next event that is not a BOOKMARK.
  Next ReadSkippingBookmarks(json* event, absl::Duration timeout = absl::Seconds(10)) {
    while (true) {
      Next n = Read(event, timeout);
      if (n != Next::kEvent || (*event)["type"] != "BOOKMARK") return n;
    }
  }

 private:
  int fd_;
  Reader reader_;
  Response head_;
  std::string pending_;
  bool ended_ = false;
};

// --- fixtures --------------------------------------------------------------

json ConfigMap(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"data", {{"k", "v"}}}};
}

json StatefulSet(const std::string& name, int replicas) {
  return {{"apiVersion", "apps/v1"},
          {"kind", "StatefulSet"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicas", replicas},
            {"serviceName", name},
            {"selector", {{"matchLabels", {{"app", name}}}}},
            {"template",
             {{"metadata", {{"labels", {{"app", name}}}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "img:1"}}}}}}}}}}};
}

json TestJobCrd() {
  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "testjobs.test.shadowsync.io"}}},
      {"spec",
       {{"group", "test.shadowsync.io"},
        {"scope", "Namespaced"},
        {"names",
         {{"plural", "testjobs"},
          {"singular", "testjob"},
          {"kind", "TestJob"},
          {"shortNames", {"tj"}},
          {"categories", {"shadowsync-test"}}}},
        {"versions",
         {{{"name", "v1alpha1"},
           {"served", true},
           {"storage", true},
           {"subresources",
            {{"status", json::object()},
             {"scale",
              {{"specReplicasPath", ".spec.trainer.replicas"},
               {"statusReplicasPath", ".status.replicaStatuses.trainer.active"},
               {"labelSelectorPath", ".status.selector"}}}}},
           {"additionalPrinterColumns",
            {{{"name", "Phase"}, {"type", "string"}, {"jsonPath", ".status.phase"}},
             {{"name", "Trainers"}, {"type", "integer"}, {"jsonPath", ".spec.trainer.replicas"}},
             {{"name", "Ready"},
              {"type", "integer"},
              {"jsonPath", ".status.replicaStatuses.trainer.ready"}}}}}}}}}};
}

json TestJob(const std::string& name, int trainers) {
  return {{"apiVersion", "test.shadowsync.io/v1alpha1"},
          {"kind", "TestJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"trainer", {{"replicas", trainers}}}}}};
}

std::string Rv(const json& obj) { return obj["metadata"]["resourceVersion"].get<std::string>(); }

class FakeKubeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeKubeApiServerOptions options;
    options.bookmark_interval = absl::Milliseconds(200);
    auto s = FakeKubeApiServer::Start(options);
    ASSERT_TRUE(s.ok()) << s.status();
    api_ = std::move(*s);
    port_ = api_->port();
  }

  Response Post(const std::string& path, const json& obj) {
    return Do(port_, "POST", path, obj.dump());
  }
  Response Put(const std::string& path, const json& obj) {
    return Do(port_, "PUT", path, obj.dump());
  }
  Response Patch(const std::string& path, const json& patch, const std::string& type) {
    return Do(port_, "PATCH", path, patch.dump(), type);
  }
  Response Get(const std::string& path) { return Do(port_, "GET", path); }
  Response Delete(const std::string& path, const json& options = nullptr) {
    return Do(port_, "DELETE", path, options.is_null() ? "" : options.dump());
  }
  std::vector<std::string> Names(const std::string& list_path) {
    const json list = Get(list_path).Json();
    std::vector<std::string> names;
    for (const json& item : list["items"]) names.push_back(item["metadata"]["name"]);
    return names;
  }

  std::unique_ptr<FakeKubeApiServer> api_;
  int port_ = 0;
};

// --- CRUD ------------------------------------------------------------------

TEST_F(FakeKubeApiServerTest, CreateGetAndListWithLabelSelectors) {
  ASSERT_EQ(Post(kCms, ConfigMap("a", {{"app", "x"}, {"tier", "db"}})).code, 201);
  ASSERT_EQ(Post(kCms, ConfigMap("b", {{"app", "y"}})).code, 201);
  ASSERT_EQ(Post(kCms, ConfigMap("c", {{"app", "z"}, {"tier", "web"}})).code, 201);

  Response got = Get(absl::StrCat(kCms, "/a"));
  ASSERT_EQ(got.code, 200);
  json a = got.Json();
  EXPECT_EQ(a["kind"], "ConfigMap");
  EXPECT_EQ(a["metadata"]["namespace"], "default");
  EXPECT_EQ(a["metadata"]["generation"], 1);
  EXPECT_FALSE(a["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(a["metadata"]["creationTimestamp"].get<std::string>().empty());

  Response list = Get(kCms);
  ASSERT_EQ(list.code, 200);
  EXPECT_EQ(list.Json()["kind"], "ConfigMapList");
  EXPECT_EQ(list.Json()["metadata"]["resourceVersion"], std::to_string(api_->resource_version()));

  using V = std::vector<std::string>;
  const std::string q = absl::StrCat(kCms, "?labelSelector=");
  EXPECT_EQ(Names(q + "app%3Dx"), V({"a"}));
  EXPECT_EQ(Names(q + "app%3D%3Dy"), V({"b"}));
  EXPECT_EQ(Names(q + "app!%3Dx"), V({"b", "c"}));
  EXPECT_EQ(Names(q + "app+in+(x,z)"), V({"a", "c"}));
  EXPECT_EQ(Names(q + "app%20notin%20(x)"), V({"b", "c"}));
  EXPECT_EQ(Names(q + "tier"), V({"a", "c"}));
  EXPECT_EQ(Names(q + "!tier"), V({"b"}));
  EXPECT_EQ(Names(q + "tier,app%3Dz"), V({"c"}));
  EXPECT_EQ(Names(absl::StrCat(kCms, "?fieldSelector=metadata.name%3Db")), V({"b"}));
  EXPECT_EQ(Get(q + "app+in+x").code, 400);
  EXPECT_EQ(Get("/api/v1/configmaps").Json()["items"].size(), 3u);  // all namespaces
}

TEST_F(FakeKubeApiServerTest, ListPagesWithLimitAndContinue) {
  for (const char* n : {"a", "b", "c"}) ASSERT_EQ(Post(kCms, ConfigMap(n)).code, 201);
  json page = Get(absl::StrCat(kCms, "?limit=2")).Json();
  ASSERT_EQ(page["items"].size(), 2u);
  const std::string token = page["metadata"]["continue"];
  json rest = Get(absl::StrCat(kCms, "?limit=2&continue=", token)).Json();
  ASSERT_EQ(rest["items"].size(), 1u);
  EXPECT_EQ(rest["items"][0]["metadata"]["name"], "c");
  EXPECT_FALSE(rest["metadata"].contains("continue"));
}

TEST_F(FakeKubeApiServerTest, CreateValidatesNamesAndNamespaces) {
  Response twice = Post(kCms, ConfigMap("a"));
  ASSERT_EQ(twice.code, 201);
  twice = Post(kCms, ConfigMap("a"));
  EXPECT_EQ(twice.code, 409);
  EXPECT_EQ(twice.Json()["kind"], "Status");
  EXPECT_EQ(twice.Json()["reason"], "AlreadyExists");
  EXPECT_EQ(twice.Json()["details"]["name"], "a");

  json unnamed = ConfigMap("");
  unnamed["metadata"].erase("name");
  EXPECT_EQ(Post(kCms, unnamed).code, 422);
  unnamed["metadata"]["generateName"] = "gen-";
  Response generated = Post(kCms, unnamed);
  ASSERT_EQ(generated.code, 201);
  EXPECT_TRUE(absl::StartsWith(generated.Json()["metadata"]["name"].get<std::string>(), "gen-"));
  EXPECT_EQ(Post(kCms, ConfigMap("Bad_Name")).code, 422);

  json elsewhere = ConfigMap("x");
  elsewhere["metadata"]["namespace"] = "other";
  EXPECT_EQ(Post(kCms, elsewhere).code, 400);
  Response missing_ns = Post("/api/v1/namespaces/nope/configmaps", ConfigMap("x"));
  EXPECT_EQ(missing_ns.code, 404);
  EXPECT_EQ(missing_ns.Json()["reason"], "NotFound");
  EXPECT_EQ(Get(absl::StrCat(kCms, "/none")).Json()["reason"], "NotFound");
  EXPECT_EQ(Get("/apis/nothing.io/v1/things").code, 404);
}

TEST_F(FakeKubeApiServerTest, UpdateWithStaleResourceVersionConflicts) {
  json cm = Post(kCms, ConfigMap("a")).Json();
  json first = cm;
  first["data"]["k"] = "v1";
  Response ok = Put(absl::StrCat(kCms, "/a"), first);
  ASSERT_EQ(ok.code, 200);
  EXPECT_GT(std::stoll(Rv(ok.Json())), std::stoll(Rv(cm)));

  json stale = cm;  // still carries the creation resourceVersion
  stale["data"]["k"] = "v2";
  Response conflict = Put(absl::StrCat(kCms, "/a"), stale);
  EXPECT_EQ(conflict.code, 409);
  EXPECT_EQ(conflict.Json()["reason"], "Conflict");
  EXPECT_THAT(conflict.Json()["message"].get<std::string>(),
              ::testing::HasSubstr("the object has been modified"));

  stale["metadata"].erase("resourceVersion");  // unconditional
  ASSERT_EQ(Put(absl::StrCat(kCms, "/a"), stale).code, 200);
  EXPECT_EQ(Get(absl::StrCat(kCms, "/a")).Json()["data"]["k"], "v2");

  json renamed = stale;
  renamed["metadata"]["name"] = "b";
  EXPECT_EQ(Put(absl::StrCat(kCms, "/a"), renamed).code, 400);
  EXPECT_EQ(Put(absl::StrCat(kCms, "/zzz"), ConfigMap("zzz")).code, 404);
}

TEST_F(FakeKubeApiServerTest, NoOpUpdateKeepsResourceVersion) {
  json cm = Post(kCms, ConfigMap("a")).Json();
  const int64_t before = api_->resource_version();
  Response same = Put(absl::StrCat(kCms, "/a"), cm);
  ASSERT_EQ(same.code, 200);
  EXPECT_EQ(Rv(same.Json()), Rv(cm));
  EXPECT_EQ(api_->resource_version(), before);
}

TEST_F(FakeKubeApiServerTest, GenerationBumpsOnSpecChangeOnly) {
  json sts = Post(kSts, StatefulSet("s", 1)).Json();
  ASSERT_EQ(sts["metadata"]["generation"], 1);
  const std::string path = absl::StrCat(kSts, "/s");

  sts["metadata"]["labels"] = {{"new", "label"}};
  sts = Put(path, sts).Json();
  EXPECT_EQ(sts["metadata"]["generation"], 1) << "labels are metadata";

  sts["status"] = {{"replicas", 1}};
  sts = Put(absl::StrCat(path, "/status"), sts).Json();
  EXPECT_EQ(sts["status"]["replicas"], 1);
  EXPECT_EQ(sts["metadata"]["generation"], 1) << "status is not spec";

  sts["spec"]["replicas"] = 2;
  sts = Put(path, sts).Json();
  EXPECT_EQ(sts["metadata"]["generation"], 2);

  sts = Patch(path, {{"spec", {{"replicas", 3}}}}, "application/merge-patch+json").Json();
  EXPECT_EQ(sts["metadata"]["generation"], 3);
}

TEST_F(FakeKubeApiServerTest, StatusSubresourceIgnoresSpecAndMainResourceIgnoresStatus) {
  json sts = Post(kSts, StatefulSet("s", 1)).Json();
  const std::string path = absl::StrCat(kSts, "/s");

  json via_status = sts;
  via_status["spec"]["replicas"] = 5;
  via_status["status"] = {{"replicas", 1}, {"readyReplicas", 1}};
  json after = Put(absl::StrCat(path, "/status"), via_status).Json();
  EXPECT_EQ(after["spec"]["replicas"], 1);
  EXPECT_EQ(after["status"]["readyReplicas"], 1);

  json via_main = after;
  via_main["status"]["readyReplicas"] = 0;
  via_main["spec"]["replicas"] = 2;
  after = Put(path, via_main).Json();
  EXPECT_EQ(after["spec"]["replicas"], 2);
  EXPECT_EQ(after["status"]["readyReplicas"], 1);

  // Create resets status for kinds with a status subresource.
  json with_status = StatefulSet("t", 1);
  with_status["status"] = {{"replicas", 7}};
  EXPECT_FALSE(Post(kSts, with_status).Json()["status"].contains("replicas"));

  // A status patch.
  after = Patch(absl::StrCat(path, "/status"), {{"status", {{"readyReplicas", 2}}}},
                "application/merge-patch+json")
              .Json();
  EXPECT_EQ(after["status"]["readyReplicas"], 2);
  // No status subresource on configmaps.
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  EXPECT_EQ(Get(absl::StrCat(kCms, "/a/status")).code, 404);
}

TEST_F(FakeKubeApiServerTest, ScaleSubresourceOnStatefulSetAndCrd) {
  ASSERT_EQ(Post(kSts, StatefulSet("s", 2)).code, 201);
  Response scale = Get(absl::StrCat(kSts, "/s/scale"));
  ASSERT_EQ(scale.code, 200);
  json sc = scale.Json();
  EXPECT_EQ(sc["kind"], "Scale");
  EXPECT_EQ(sc["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(sc["spec"]["replicas"], 2);
  EXPECT_EQ(sc["status"]["selector"], "app=s");
  sc["spec"]["replicas"] = 4;
  ASSERT_EQ(Put(absl::StrCat(kSts, "/s/scale"), sc).code, 200);
  json sts = Get(absl::StrCat(kSts, "/s")).Json();
  EXPECT_EQ(sts["spec"]["replicas"], 4);
  EXPECT_EQ(sts["metadata"]["generation"], 2);
  EXPECT_EQ(Put(absl::StrCat(kSts, "/s/scale"), sc).code, 409) << "stale resourceVersion";

  ASSERT_EQ(Post(kCrds, TestJobCrd()).code, 201);
  ASSERT_EQ(Post(kJobs, TestJob("j", 2)).code, 201);
  const std::string job = absl::StrCat(kJobs, "/j");
  json status = Get(job).Json();
  status["status"] = {{"replicaStatuses", {{"trainer", {{"active", 2}}}}}, {"selector", "job=j"}};
  ASSERT_EQ(Put(absl::StrCat(job, "/status"), status).code, 200);
  sc = Get(absl::StrCat(job, "/scale")).Json();
  EXPECT_EQ(sc["spec"]["replicas"], 2);
  EXPECT_EQ(sc["status"]["replicas"], 2);
  EXPECT_EQ(sc["status"]["selector"], "job=j");
  Response patched = Patch(absl::StrCat(job, "/scale"), {{"spec", {{"replicas", 3}}}},
                           "application/merge-patch+json");
  ASSERT_EQ(patched.code, 200);
  EXPECT_EQ(patched.Json()["spec"]["replicas"], 3);
  EXPECT_EQ(Get(job).Json()["spec"]["trainer"]["replicas"], 3);
  EXPECT_EQ(Get(absl::StrCat(kCms, "/x/scale")).code, 404);
}

TEST_F(FakeKubeApiServerTest, MergeJsonAndStrategicPatches) {
  ASSERT_EQ(Post(kCms, ConfigMap("a", {{"keep", "1"}, {"drop", "1"}})).code, 201);
  const std::string path = absl::StrCat(kCms, "/a");
  Response merged = Patch(path, {{"metadata", {{"labels", {{"drop", nullptr}, {"add", "2"}}}}}},
                          "application/merge-patch+json");
  ASSERT_EQ(merged.code, 200);
  EXPECT_EQ(merged.Json()["metadata"]["labels"], json({{"keep", "1"}, {"add", "2"}}));

  json ops = json::array({{{"op", "test"}, {"path", "/data/k"}, {"value", "v"}},
                          {{"op", "replace"}, {"path", "/data/k"}, {"value", "w"}},
                          {{"op", "add"}, {"path", "/data/n"}, {"value", "1"}}});
  Response patched = Patch(path, ops, "application/json-patch+json");
  ASSERT_EQ(patched.code, 200);
  EXPECT_EQ(patched.Json()["data"], json({{"k", "w"}, {"n", "1"}}));
  Response failed_test =
      Patch(path, json::array({{{"op", "test"}, {"path", "/data/k"}, {"value", "v"}}}),
            "application/json-patch+json");
  EXPECT_EQ(failed_test.code, 422);
  // A patch carrying a stale resourceVersion conflicts.
  EXPECT_EQ(
      Patch(path, {{"metadata", {{"resourceVersion", "1"}}}}, "application/merge-patch+json").code,
      409);
  EXPECT_EQ(Patch(path, {{"data", nullptr}}, "text/plain").code, 415);

  // Strategic merge: containers merge by name instead of being replaced.
  json sts = StatefulSet("s", 1);
  sts["spec"]["template"]["spec"]["containers"].push_back({{"name", "side"}, {"image", "s:1"}});
  ASSERT_EQ(Post(kSts, sts).code, 201);
  Response smp = Patch(
      absl::StrCat(kSts, "/s"),
      {{"spec",
        {{"template", {{"spec", {{"containers", {{{"name", "main"}, {"image", "img:2"}}}}}}}}}}},
      "application/strategic-merge-patch+json");
  ASSERT_EQ(smp.code, 200);
  json containers = smp.Json()["spec"]["template"]["spec"]["containers"];
  ASSERT_EQ(containers.size(), 2u);
  EXPECT_EQ(containers[0]["image"], "img:2");
  EXPECT_EQ(containers[1]["name"], "side");
}

TEST_F(FakeKubeApiServerTest, DeleteCascadesToOwnedObjects) {
  json owner = Post(kSts, StatefulSet("owner", 1)).Json();
  json other = Post(kCms, ConfigMap("other-owner")).Json();
  auto ref = [](const json& o, const std::string& kind, const std::string& api_version) {
    return json{{"apiVersion", api_version},
                {"kind", kind},
                {"name", o["metadata"]["name"]},
                {"uid", o["metadata"]["uid"]},
                {"controller", kind == "StatefulSet"}};
  };
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "owner-0"}, {"ownerReferences", {ref(owner, "StatefulSet", "apps/v1")}}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "img"}}}}}}};
  json pod_json = Post(kPods, pod).Json();
  EXPECT_EQ(pod_json["status"]["phase"], "Pending");
  json grandchild = ConfigMap("pod-data");
  grandchild["metadata"]["ownerReferences"] = json::array({ref(pod_json, "Pod", "v1")});
  ASSERT_EQ(Post(kCms, grandchild).code, 201);
  json shared = ConfigMap("shared");
  shared["metadata"]["ownerReferences"] = {ref(owner, "StatefulSet", "apps/v1"),
                                           ref(other, "ConfigMap", "v1")};
  ASSERT_EQ(Post(kCms, shared).code, 201);

  ASSERT_EQ(Delete(absl::StrCat(kSts, "/owner"), {{"propagationPolicy", "Background"}}).code, 200);
  EXPECT_EQ(Get(absl::StrCat(kPods, "/owner-0")).code, 404);
  EXPECT_EQ(Get(absl::StrCat(kCms, "/pod-data")).code, 404) << "cascades recursively";
  Response kept = Get(absl::StrCat(kCms, "/shared"));
  ASSERT_EQ(kept.code, 200) << "another owner is alive";
  EXPECT_EQ(kept.Json()["metadata"]["ownerReferences"].size(), 1u);

  // Orphan keeps the dependents and drops the reference.
  json owner2 = Post(kSts, StatefulSet("owner2", 1)).Json();
  json orphan = ConfigMap("orphan");
  orphan["metadata"]["ownerReferences"] = json::array({ref(owner2, "StatefulSet", "apps/v1")});
  ASSERT_EQ(Post(kCms, orphan).code, 201);
  ASSERT_EQ(Delete(absl::StrCat(kSts, "/owner2"), {{"propagationPolicy", "Orphan"}}).code, 200);
  Response orphaned = Get(absl::StrCat(kCms, "/orphan"));
  ASSERT_EQ(orphaned.code, 200);
  EXPECT_FALSE(orphaned.Json()["metadata"].contains("ownerReferences"));

  EXPECT_EQ(Delete(absl::StrCat(kSts, "/owner")).code, 404);
}

TEST_F(FakeKubeApiServerTest, FinalizersDelayDeletion) {
  json cm = ConfigMap("f");
  cm["metadata"]["finalizers"] = {"test/finalizer"};
  ASSERT_EQ(Post(kCms, cm).code, 201);
  const std::string path = absl::StrCat(kCms, "/f");
  ASSERT_EQ(Delete(path).code, 200);
  json terminating = Get(path).Json();
  EXPECT_TRUE(terminating["metadata"].contains("deletionTimestamp"));
  terminating["metadata"]["finalizers"] = json::array();
  ASSERT_EQ(Put(path, terminating).code, 200);
  EXPECT_EQ(Get(path).code, 404);
}

TEST_F(FakeKubeApiServerTest, DeleteHonoursPreconditions) {
  json cm = Post(kCms, ConfigMap("a")).Json();
  const std::string path = absl::StrCat(kCms, "/a");
  EXPECT_EQ(Delete(path, {{"preconditions", {{"uid", "not-the-uid"}}}}).code, 409);
  EXPECT_EQ(Delete(path, {{"preconditions", {{"resourceVersion", Rv(cm)}}}}).code, 200);
}

// --- watch -----------------------------------------------------------------

TEST_F(FakeKubeApiServerTest, WatchFromResourceVersionReplaysLaterEventsInOrder) {
  json a = Post(kCms, ConfigMap("a")).Json();
  const std::string from = Rv(a);
  json b = Post(kCms, ConfigMap("b")).Json();
  a["data"]["k"] = "changed";
  ASSERT_EQ(Put(absl::StrCat(kCms, "/a"), a).code, 200);
  ASSERT_EQ(Delete(absl::StrCat(kCms, "/b")).code, 200);
  ASSERT_EQ(Post(kSts, StatefulSet("elsewhere", 1)).code, 201);  // another resource

  Watch w(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", from));
  ASSERT_EQ(w.code(), 200);
  EXPECT_EQ(w.head().headers.at("transfer-encoding"), "chunked");
  json e;
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "b");
  EXPECT_EQ(e["object"]["kind"], "ConfigMap");
  int64_t last = std::stoll(Rv(e["object"]));
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "MODIFIED");
  EXPECT_EQ(e["object"]["data"]["k"], "changed");
  EXPECT_GT(std::stoll(Rv(e["object"])), last);
  last = std::stoll(Rv(e["object"]));
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "DELETED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "b");
  EXPECT_GT(std::stoll(Rv(e["object"])), last);
  EXPECT_EQ(w.Read(&e, absl::Milliseconds(300)), Watch::Next::kTimeout) << e.dump();

  // Then live events.
  ASSERT_EQ(Post(kCms, ConfigMap("c")).code, 201);
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "c");
}

TEST_F(FakeKubeApiServerTest, WatchFromZeroListsCurrentObjectsFirst) {
  ASSERT_EQ(Post(kCms, ConfigMap("a", {{"app", "x"}})).code, 201);
  ASSERT_EQ(Post(kCms, ConfigMap("b", {{"app", "y"}})).code, 201);
  Watch w(port_, absl::StrCat(kCms, "?watch=true&resourceVersion=0&labelSelector=app%3Dx"));
  json e;
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "a");
  // b starts matching → ADDED; a stops matching → DELETED.
  ASSERT_EQ(Patch(absl::StrCat(kCms, "/b"), {{"metadata", {{"labels", {{"app", "x"}}}}}},
                  "application/merge-patch+json")
                .code,
            200);
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "b");
  ASSERT_EQ(Patch(absl::StrCat(kCms, "/a"), {{"metadata", {{"labels", {{"app", "z"}}}}}},
                  "application/merge-patch+json")
                .code,
            200);
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "DELETED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "a");
}

TEST_F(FakeKubeApiServerTest, WatchListSendsInitialEventsThenAnnotatedBookmark) {
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  Watch w(port_, absl::StrCat(kCms,
                              "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&"
                              "resourceVersionMatch=NotOlderThan&resourceVersion=",
                              api_->resource_version()));
  json e;
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "a");
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "BOOKMARK");
  EXPECT_EQ(e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
}

TEST_F(FakeKubeApiServerTest, WatchOfClusterScopedAndAllNamespaces) {
  Watch all(port_, "/api/v1/configmaps?watch=1");
  Watch namespaces(port_, "/api/v1/namespaces?watch=1");
  json e;
  for (int i = 0; i < 4; ++i) {  // the four namespaces present at start
    ASSERT_EQ(namespaces.Read(&e), Watch::Next::kEvent);
    EXPECT_EQ(e["type"], "ADDED");
  }
  ASSERT_EQ(Post("/api/v1/namespaces",
                 {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team"}}}})
                .code,
            201);
  ASSERT_EQ(namespaces.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["object"]["metadata"]["name"], "team");
  EXPECT_EQ(e["object"]["status"]["phase"], "Active");
  ASSERT_EQ(Post("/api/v1/namespaces/team/configmaps", ConfigMap("t")).code, 201);
  ASSERT_EQ(all.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["object"]["metadata"]["namespace"], "team");
  // Deleting the namespace deletes what is in it.
  ASSERT_EQ(Delete("/api/v1/namespaces/team").code, 200);
  ASSERT_EQ(all.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "DELETED");
  EXPECT_EQ(Get("/api/v1/namespaces/team/configmaps/t").code, 404);
}

TEST_F(FakeKubeApiServerTest, WatchFromCompactedResourceVersionGetsExpiredThenCloses) {
  json a = Post(kCms, ConfigMap("a")).Json();
  ASSERT_EQ(Post(kCms, ConfigMap("b")).code, 201);
  api_->Compact();
  Watch w(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", Rv(a)));
  ASSERT_EQ(w.code(), 200);
  json e;
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ERROR");
  EXPECT_EQ(e["object"]["kind"], "Status");
  EXPECT_EQ(e["object"]["code"], 410);
  EXPECT_EQ(e["object"]["reason"], "Expired");
  EXPECT_THAT(e["object"]["message"].get<std::string>(),
              ::testing::HasSubstr("too old resource version: " + Rv(a)));
  EXPECT_EQ(w.Read(&e), Watch::Next::kCleanEnd);

  // From the current revision it works.
  Watch fresh(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", api_->resource_version()));
  ASSERT_EQ(Post(kCms, ConfigMap("c")).code, 201);
  ASSERT_EQ(fresh.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "ADDED");
}

TEST(FakeKubeApiServerHistoryTest, WatchOlderThanTheHistoryRingExpires) {
  FakeKubeApiServerOptions options;
  options.watch_history = 2;
  auto api = FakeKubeApiServer::Start(options);
  ASSERT_TRUE(api.ok());
  const int port = (*api)->port();
  const int64_t start = (*api)->resource_version();
  for (const char* n : {"a", "b", "c"}) {
    ASSERT_EQ(Do(port, "POST", kCms, ConfigMap(n).dump()).code, 201);
  }
  Watch old(port, absl::StrCat(kCms, "?watch=1&resourceVersion=", start));
  json e;
  ASSERT_EQ(old.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["object"]["code"], 410);
  Watch recent(port, absl::StrCat(kCms, "?watch=1&resourceVersion=", start + 1));
  ASSERT_EQ(recent.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["object"]["metadata"]["name"], "b");
}

TEST_F(FakeKubeApiServerTest, BookmarksArrive) {
  Watch w(port_, absl::StrCat(kCms, "?watch=1&allowWatchBookmarks=true&resourceVersion=",
                              api_->resource_version()));
  json e;
  ASSERT_EQ(w.Read(&e, absl::Seconds(5)), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "BOOKMARK");
  EXPECT_EQ(e["object"]["kind"], "ConfigMap");
  EXPECT_EQ(e["object"]["apiVersion"], "v1");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"], std::to_string(api_->resource_version()));
  EXPECT_EQ(e["object"]["metadata"].size(), 1u);
  ASSERT_EQ(Post(kSts, StatefulSet("s", 1)).code, 201);  // moves the revision on
  ASSERT_EQ(w.Read(&e, absl::Seconds(5)), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "BOOKMARK");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"], std::to_string(api_->resource_version()));

  Watch none(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", api_->resource_version()));
  EXPECT_EQ(none.Read(&e, absl::Milliseconds(600)), Watch::Next::kTimeout) << e.dump();
}

TEST_F(FakeKubeApiServerTest, TimeoutSecondsEndsTheStreamCleanly) {
  const absl::Time start = absl::Now();
  Watch w(port_, absl::StrCat(
                     kCms, "?watch=1&timeoutSeconds=1&resourceVersion=", api_->resource_version()));
  json e;
  EXPECT_EQ(w.Read(&e, absl::Seconds(5)), Watch::Next::kCleanEnd);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_F(FakeKubeApiServerTest, DropWatchesCutsTheStream) {
  Watch w(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", api_->resource_version()));
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(5)));
  ASSERT_EQ(api_->active_watches(), 1);
  api_->DropWatches();
  json e;
  EXPECT_EQ(w.Read(&e, absl::Seconds(5)), Watch::Next::kCut);
  // A new watch works.
  Watch again(port_, absl::StrCat(kCms, "?watch=1&resourceVersion=", api_->resource_version()));
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  ASSERT_EQ(again.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["object"]["metadata"]["name"], "a");
}

TEST_F(FakeKubeApiServerTest, ServerShutdownCutsOpenWatches) {
  Watch w(port_, absl::StrCat(kCms, "?watch=1"));
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(5)));
  api_.reset();
  json e;
  EXPECT_EQ(w.Read(&e, absl::Seconds(5)), Watch::Next::kCut);
}

// The operator's HTTP client reads a watch as it streams.
TEST_F(FakeKubeApiServerTest, CpprestsdkReadsStreamedWatchEvents) {
  web::http::client::http_client_config config;
  config.set_timeout(std::chrono::seconds(30));
  web::http::client::http_client client(api_->url(), config);
  web::http::http_request request(web::http::methods::GET);
  request.set_request_uri(
      absl::StrCat(kCms, "?watch=1&resourceVersion=", api_->resource_version()));
  web::http::http_response response = client.request(request).get();
  ASSERT_EQ(response.status_code(), 200);
  auto body = response.body();

  auto read_line = [&body]() -> std::optional<json> {
    concurrency::streams::container_buffer<std::string> line;
    auto task = body.read_line(line);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!task.is_done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    if (!task.is_done()) return std::nullopt;
    task.get();
    return json::parse(line.collection(), nullptr, false);
  };
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  std::optional<json> e = read_line();
  ASSERT_TRUE(e.has_value()) << "the event did not arrive while the stream was open";
  EXPECT_EQ((*e)["type"], "ADDED");
  EXPECT_EQ((*e)["object"]["metadata"]["name"], "a");
  ASSERT_EQ(Post(kCms, ConfigMap("b")).code, 201);
  e = read_line();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["object"]["metadata"]["name"], "b");
  api_->DropWatches();
  body.close().wait();
}

// --- faults, records, tables, discovery ------------------------------------

TEST_F(FakeKubeApiServerTest, FaultInjectionReturnsTheCodeNTimesThenRecovers) {
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  api_->InjectFault({.method = "GET", .path_contains = "/configmaps/a", .code = 503, .times = 2});
  Response r = Get(absl::StrCat(kCms, "/a"));
  EXPECT_EQ(r.code, 503);
  EXPECT_EQ(r.Json()["kind"], "Status");
  EXPECT_EQ(r.Json()["reason"], "ServiceUnavailable");
  EXPECT_EQ(Get(kCms).code, 200) << "path does not match";
  EXPECT_EQ(Get(absl::StrCat(kCms, "/a")).code, 503);
  EXPECT_EQ(Get(absl::StrCat(kCms, "/a")).code, 200);

  api_->InjectFault({.method = "PUT", .code = 409, .times = 1});
  json cm = Get(absl::StrCat(kCms, "/a")).Json();
  EXPECT_EQ(Put(absl::StrCat(kCms, "/a"), cm).code, 409);
  EXPECT_EQ(Put(absl::StrCat(kCms, "/a"), cm).code, 200);

  api_->InjectFault({.method = "WATCH", .code = 500});
  EXPECT_EQ(Get(absl::StrCat(kCms, "?watch=1")).code, 500);
  Response too_many = [&] {
    api_->InjectFault({.code = 429});
    return Get(kCms);
  }();
  EXPECT_EQ(too_many.code, 429);
  EXPECT_EQ(too_many.headers["retry-after"], "1");
}

TEST_F(FakeKubeApiServerTest, FaultDelayIsObserved) {
  api_->InjectFault({.method = "GET", .code = 0, .times = 1, .delay = absl::Milliseconds(400)});
  absl::Time start = absl::Now();
  EXPECT_EQ(Get(kCms).code, 200);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(390));
  start = absl::Now();
  EXPECT_EQ(Get(kCms).code, 200);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300));
}

TEST_F(FakeKubeApiServerTest, RecordsEveryRequest) {
  api_->ClearRequests();
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  ASSERT_EQ(Get(absl::StrCat(kCms, "/b")).code, 404);
  std::vector<FakeKubeApiServer::Request> requests = api_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].path, kCms);
  EXPECT_EQ(requests[0].status, 201);
  EXPECT_EQ(requests[1].status, 404);
  ASSERT_EQ(Get(absl::StrCat(kCms, "?labelSelector=a%3Db")).code, 200);
  EXPECT_EQ(api_->Requests().back().query, "labelSelector=a%3Db");
}

TEST_F(FakeKubeApiServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  const int fd = Connect(port_);
  Reader r(fd);
  for (int i = 0; i < 3; ++i) {
    const std::string req = RequestText("GET", "/version", "", "", "application/json");
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    Response resp;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    ASSERT_TRUE(ReadHead(r, &resp, deadline) && ReadBody(r, &resp, deadline));
    EXPECT_EQ(resp.code, 200);
    EXPECT_EQ(resp.Json()["major"], "1");
  }
  close(fd);
}

TEST_F(FakeKubeApiServerTest, RendersTablesWithPrinterColumns) {
  ASSERT_EQ(Post(kCrds, TestJobCrd()).code, 201);
  ASSERT_EQ(Post(kJobs, TestJob("j", 4)).code, 201);
  const std::string table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
  Response r = Do(port_, "GET", kJobs, "", "", table);
  ASSERT_EQ(r.code, 200);
  json t = r.Json();
  EXPECT_EQ(t["kind"], "Table");
  EXPECT_EQ(t["apiVersion"], "meta.k8s.io/v1");
  std::vector<std::string> names;
  for (const json& c : t["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names, std::vector<std::string>({"Name", "Phase", "Trainers", "Ready", "Age"}));
  ASSERT_EQ(t["rows"].size(), 1u);
  EXPECT_EQ(t["rows"][0]["cells"][0], "j");
  EXPECT_TRUE(t["rows"][0]["cells"][1].is_null());
  EXPECT_EQ(t["rows"][0]["cells"][2], 4);
  EXPECT_THAT(t["rows"][0]["cells"][4].get<std::string>(), ::testing::EndsWith("s"));
  EXPECT_EQ(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");

  json job = Get(absl::StrCat(kJobs, "/j")).Json();
  job["status"] = {{"phase", "Running"}, {"replicaStatuses", {{"trainer", {{"ready", 3}}}}}};
  ASSERT_EQ(Put(absl::StrCat(kJobs, "/j/status"), job).code, 200);
  t = Do(port_, "GET", absl::StrCat(kJobs, "/j?includeObject=Object"), "", "", table).Json();
  EXPECT_EQ(t["rows"][0]["cells"][1], "Running");
  EXPECT_EQ(t["rows"][0]["cells"][3], 3);
  EXPECT_EQ(t["rows"][0]["object"]["kind"], "TestJob");

  t = Do(port_, "GET", kCms, "", "", table).Json();
  names.clear();
  for (const json& c : t["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names, std::vector<std::string>({"Name", "Age"}));
}

TEST_F(FakeKubeApiServerTest, CrdRegistrationAppearsInDiscoveryAndDisappearsOnDelete) {
  auto has_group = [&] {
    const json groups = Get("/apis").Json();
    for (const json& g : groups["groups"]) {
      if (g["name"] == "test.shadowsync.io") return true;
    }
    return false;
  };
  EXPECT_FALSE(has_group());
  EXPECT_EQ(Get(kJobs).code, 404);

  Response created = Post(kCrds, TestJobCrd());
  ASSERT_EQ(created.code, 201);
  json conditions = created.Json()["status"]["conditions"];
  std::map<std::string, std::string> status;
  for (const json& c : conditions) status[c["type"]] = c["status"];
  EXPECT_EQ(status["Established"], "True");
  EXPECT_EQ(status["NamesAccepted"], "True");

  EXPECT_TRUE(has_group());
  json resources = Get("/apis/test.shadowsync.io/v1alpha1").Json();
  EXPECT_EQ(resources["kind"], "APIResourceList");
  std::map<std::string, json> by_name;
  for (const json& r : resources["resources"]) by_name[r["name"]] = r;
  ASSERT_TRUE(by_name.count("testjobs"));
  EXPECT_EQ(by_name["testjobs"]["kind"], "TestJob");
  EXPECT_EQ(by_name["testjobs"]["singularName"], "testjob");
  EXPECT_EQ(by_name["testjobs"]["namespaced"], true);
  EXPECT_EQ(by_name["testjobs"]["shortNames"], json({"tj"}));
  EXPECT_EQ(by_name["testjobs"]["categories"], json({"shadowsync-test"}));
  EXPECT_TRUE(by_name.count("testjobs/status"));
  ASSERT_TRUE(by_name.count("testjobs/scale"));
  EXPECT_EQ(by_name["testjobs/scale"]["group"], "autoscaling");
  EXPECT_EQ(by_name["testjobs/scale"]["kind"], "Scale");
  EXPECT_EQ(Get(kJobs).code, 200);
  ASSERT_EQ(Post(kJobs, TestJob("j", 1)).code, 201);
  Watch w(port_, absl::StrCat(kJobs, "?watch=1&resourceVersion=", api_->resource_version()));
  ASSERT_TRUE(api_->WaitForWatches(1, absl::Seconds(5)));

  ASSERT_EQ(Delete(absl::StrCat(kCrds, "/testjobs.test.shadowsync.io")).code, 200);
  EXPECT_FALSE(has_group());
  EXPECT_EQ(Get("/apis/test.shadowsync.io/v1alpha1").code, 404);
  EXPECT_EQ(Get(kJobs).code, 404);
  json e;
  ASSERT_EQ(w.Read(&e), Watch::Next::kEvent);
  EXPECT_EQ(e["type"], "DELETED") << "the CRD's objects are deleted with it";
  EXPECT_EQ(w.Read(&e), Watch::Next::kCleanEnd);

  // Invalid CRDs are rejected.
  json bad = TestJobCrd();
  bad["metadata"]["name"] = "wrong.test.shadowsync.io";
  EXPECT_EQ(Post(kCrds, bad).code, 422);
}

TEST_F(FakeKubeApiServerTest, DiscoveryServesLegacyDocuments) {
  const std::string aggregated =
      "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
  Response api = Do(port_, "GET", "/api", "", "", aggregated);
  ASSERT_EQ(api.code, 200);
  EXPECT_EQ(api.headers["content-type"], "application/json");
  EXPECT_EQ(api.Json()["kind"], "APIVersions");
  Response apis = Do(port_, "GET", "/apis", "", "", aggregated);
  EXPECT_EQ(apis.Json()["kind"], "APIGroupList");
  json core = Get("/api/v1").Json();
  bool sts_scale = false;
  const json apps = Get("/apis/apps/v1").Json();
  for (const json& r : apps["resources"]) {
    sts_scale = sts_scale || r["name"] == "statefulsets/scale";
  }
  EXPECT_TRUE(sts_scale);
  EXPECT_EQ(core["groupVersion"], "v1");
  EXPECT_EQ(Get("/version").Json()["minor"], "31");
  EXPECT_EQ(Get("/openapi/v3").code, 200);
}

TEST_F(FakeKubeApiServerTest, DirectApiSharesTheRevisionAndMapsErrors) {
  const int64_t before = api_->resource_version();
  auto created = api_->Create(kCms, ConfigMap("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(api_->resource_version(), before + 1);
  EXPECT_EQ(Rv(*created), std::to_string(before + 1));
  EXPECT_EQ(Get(absl::StrCat(kCms, "/a")).code, 200);

  EXPECT_THAT(api_->Create(kCms, ConfigMap("a")),
              StatusIs(absl::StatusCode::kAlreadyExists, "already exists"));
  EXPECT_THAT(api_->Get(absl::StrCat(kCms, "/zzz")), StatusIs(absl::StatusCode::kNotFound, ""));
  json stale = *created;
  ASSERT_TRUE(api_->Update(absl::StrCat(kCms, "/a"),
                           [&] {
                             json j = stale;
                             j["data"]["k"] = "x";
                             return j;
                           }())
                  .ok());
  stale["data"]["k"] = "y";
  EXPECT_THAT(api_->Update(absl::StrCat(kCms, "/a"), stale),
              StatusIs(absl::StatusCode::kAborted, "modified"));
  EXPECT_THAT(api_->Create(kCms, ConfigMap("BAD")),
              StatusIs(absl::StatusCode::kInvalidArgument, "invalid"));

  ASSERT_TRUE(api_->Create(kSts, StatefulSet("s", 1)).ok());
  json sts = *api_->Get(absl::StrCat(kSts, "/s"));
  sts["status"] = {{"readyReplicas", 1}};
  auto updated = api_->UpdateStatus(absl::StrCat(kSts, "/s"), sts);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["status"]["readyReplicas"], 1);
  auto listed = api_->List(kSts);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  auto patched = api_->Patch(absl::StrCat(kSts, "/s"), {{"spec", {{"replicas", 2}}}},
                             "application/merge-patch+json");
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["metadata"]["generation"], 2);
  SS_EXPECT_OK(api_->Delete(absl::StrCat(kSts, "/s")));
  EXPECT_THAT(api_->Delete(absl::StrCat(kSts, "/s")), StatusIs(absl::StatusCode::kNotFound, ""));
}

// --- identities and RBAC ---------------------------------------------------

constexpr char kSa[] = "system:serviceaccount:default:robot";

// Roles for kSa: cluster-wide reads of configmaps, the statefulsets' status
// subresource only, and events create; leases in "default" through a
// RoleBinding; pods of one name through its groups.
constexpr char kRbacYaml[] = R"(apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: robot}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["apps"]
    resources: ["statefulsets/status"]
    verbs: ["patch"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: robot}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: robot}
subjects: [{kind: ServiceAccount, name: robot, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leases, namespace: default}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leases, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}
subjects: [{kind: ServiceAccount, name: robot}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: one-pod}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    resourceNames: ["p1"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: one-pod, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: one-pod}
subjects: [{kind: Group, name: "system:serviceaccounts:default"}]
)";

class FakeKubeApiServerRbacTest : public FakeKubeApiServerTest {
 protected:
  void SetUp() override {
    FakeKubeApiServerTest::SetUp();
    WriteFile(dir_.File("rbac.yaml"), kRbacYaml);
    SS_ASSERT_OK(api_->ApplyFile(dir_.File("rbac.yaml")));
  }
  Response As(const std::string& method, const std::string& target, const std::string& body = "",
              const std::string& content_type = "application/json") {
    return Do(port_, method, target, body, content_type, "application/json",
              FakeKubeApiServer::TokenFor(kSa));
  }
  // The 403's message, after checking that it is a Forbidden Status.
  std::string Denied(const Response& r) {
    EXPECT_EQ(r.code, 403) << r.body;
    const json status = r.Json();
    EXPECT_EQ(status.value("kind", ""), "Status") << r.body;
    EXPECT_EQ(status.value("reason", ""), "Forbidden") << r.body;
    EXPECT_EQ(status.value("code", 0), 403) << r.body;
    return status.value("message", "");
  }

  ScratchDir dir_;
};

TEST_F(FakeKubeApiServerRbacTest, GrantsWhatTheRolesGrantAndNothingElse) {
  ASSERT_EQ(Post(kCms, ConfigMap("a")).code, 201);
  ASSERT_EQ(Post(kSts, StatefulSet("s", 1)).code, 201);
  EXPECT_EQ(As("GET", kCms).code, 200);
  EXPECT_EQ(As("GET", absl::StrCat(kCms, "/a")).code, 200);
  EXPECT_EQ(As("GET", absl::StrCat(kCms, "/none")).code, 404) << "authorized, then not found";
  EXPECT_EQ(As("GET", "/api/v1/configmaps").code, 200) << "a ClusterRoleBinding: every namespace";
  EXPECT_EQ(Denied(As("POST", kCms, ConfigMap("b").dump())),
            "configmaps is forbidden: User \"system:serviceaccount:default:robot\" cannot create "
            "resource \"configmaps\" in API group \"\" in the namespace \"default\"");
  const Response update = As("PUT", absl::StrCat(kCms, "/a"), ConfigMap("a").dump());
  EXPECT_EQ(Denied(update),
            "configmaps \"a\" is forbidden: User \"system:serviceaccount:default:robot\" cannot "
            "update resource \"configmaps\" in API group \"\" in the namespace \"default\"");
  EXPECT_EQ(update.Json()["details"], json({{"name", "a"}, {"kind", "configmaps"}}));
  EXPECT_THAT(Denied(As("DELETE", kCms)), ::testing::HasSubstr("cannot deletecollection"));
  EXPECT_THAT(Denied(As("DELETE", absl::StrCat(kCms, "/a"))),
              ::testing::HasSubstr("cannot delete"));

  // A subresource is its own resource: the status of a StatefulSet, not its spec.
  const json status = {{"status", {{"replicas", 1}}}};
  EXPECT_EQ(
      As("PATCH", absl::StrCat(kSts, "/s/status"), status.dump(), "application/merge-patch+json")
          .code,
      200);
  const Response spec = As("PATCH", absl::StrCat(kSts, "/s"), R"({"spec":{"replicas":2}})",
                           "application/merge-patch+json");
  EXPECT_EQ(Denied(spec),
            "statefulsets.apps \"s\" is forbidden: User \"system:serviceaccount:default:robot\" "
            "cannot patch resource \"statefulsets\" in API group \"apps\" in the namespace "
            "\"default\"");
  EXPECT_EQ(spec.Json()["details"]["group"], "apps");
  EXPECT_THAT(Denied(As("GET", absl::StrCat(kSts, "/s/status"))),
              ::testing::HasSubstr("cannot get resource \"statefulsets/status\""));

  // create but not patch on events.
  const json event = {{"metadata", {{"name", "e"}}}, {"reason", "R"}};
  EXPECT_EQ(As("POST", "/api/v1/namespaces/default/events", event.dump()).code, 201);
  EXPECT_THAT(Denied(As("PATCH", "/api/v1/namespaces/default/events/e", R"({"count":2})",
                        "application/strategic-merge-patch+json")),
              ::testing::HasSubstr("cannot patch resource \"events\""));

  // A RoleBinding grants in its namespace only.
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
  const json lease = {{"metadata", {{"name", "l"}}}, {"spec", json::object()}};
  EXPECT_EQ(As("POST", leases, lease.dump()).code, 201);
  EXPECT_EQ(As("GET", absl::StrCat(leases, "/l")).code, 200);
  EXPECT_THAT(Denied(As("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l")),
              ::testing::HasSubstr("in the namespace \"kube-system\""));
  EXPECT_THAT(Denied(As("GET", "/apis/coordination.k8s.io/v1/leases")),
              ::testing::EndsWith("cannot list resource \"leases\" in API group "
                                  "\"coordination.k8s.io\" at the cluster scope"));

  // Through a group, for one resource name.
  EXPECT_EQ(As("GET", absl::StrCat(kPods, "/p1")).code, 404);
  EXPECT_THAT(Denied(As("GET", absl::StrCat(kPods, "/p2"))), ::testing::HasSubstr("\"p2\""));
  EXPECT_THAT(Denied(As("GET", kPods)), ::testing::HasSubstr("cannot list"));

  // Discovery is open to everyone; an admin (no token) may do anything.
  EXPECT_EQ(As("GET", "/api/v1").code, 200);
  EXPECT_EQ(As("GET", "/version").code, 200);
  EXPECT_EQ(Post(kCms, ConfigMap("b")).code, 201);
}

TEST_F(FakeKubeApiServerRbacTest, WatchNeedsTheWatchVerb) {
  Watch allowed(port_, absl::StrCat(kCms, "?watch=1"));
  EXPECT_EQ(allowed.code(), 200) << "no token: the admin";
  const Response pods = As("GET", absl::StrCat(kPods, "?watch=true"));
  EXPECT_THAT(Denied(pods), ::testing::HasSubstr("cannot watch resource \"pods\""));
  // get and list do not imply watch.
  EXPECT_EQ(As("GET", absl::StrCat(kCms, "?watch=true&timeoutSeconds=1")).code, 200);
}

TEST_F(FakeKubeApiServerRbacTest, RecordsWhoAskedAndKubeconfigsCarryTheToken) {
  api_->ClearRequests();
  ASSERT_EQ(As("GET", kCms).code, 200);
  ASSERT_EQ(Get(kCms).code, 200);
  const std::vector<FakeKubeApiServer::Request> requests = api_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].user, kSa);
  EXPECT_EQ(requests[1].user, kFakeAdminUser);
  SS_ASSERT_OK(api_->WriteKubeconfig(dir_.File("sa"), "default", kSa));
  EXPECT_THAT(ReadFile(dir_.File("sa")),
              ::testing::HasSubstr(absl::StrCat("token: \"", FakeKubeApiServer::TokenFor(kSa))));
  EXPECT_NE(FakeKubeApiServer::TokenFor(kSa), FakeKubeApiServer::TokenFor(kFakeAdminUser));
}

TEST_F(FakeKubeApiServerRbacTest, ApplyFileReplacesWhatExistsAndNamesWhatFails) {
  json role = *api_->Get("/apis/rbac.authorization.k8s.io/v1/clusterroles/robot");
  EXPECT_EQ(role["rules"].size(), 3u);
  WriteFile(dir_.File("less.yaml"), R"(apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: robot}
rules: [{apiGroups: [""], resources: ["configmaps"], verbs: ["get"]}]
)");
  SS_ASSERT_OK(api_->ApplyFile(dir_.File("less.yaml")));
  role = *api_->Get("/apis/rbac.authorization.k8s.io/v1/clusterroles/robot");
  EXPECT_EQ(role["rules"].size(), 1u);
  EXPECT_THAT(Denied(As("GET", kCms)), ::testing::HasSubstr("cannot list"));

  WriteFile(dir_.File("bad.yaml"), "apiVersion: v1\nkind: Role\nmetadata: {name: x}\n");
  EXPECT_THAT(api_->ApplyFile(dir_.File("bad.yaml")),
              StatusIs(absl::StatusCode::kNotFound, "Role x: no resource of kind Role in v1"));
  EXPECT_THAT(api_->ApplyFile(dir_.File("missing.yaml")),
              StatusIs(absl::StatusCode::kInvalidArgument, "missing.yaml"));
}

}  // namespace
}  // namespace shadowsync::testing
