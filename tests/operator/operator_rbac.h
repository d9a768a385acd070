// The operator's identity in tests: its ServiceAccount with deploy/rbac.yaml's
// Roles and bindings in the fake API server, so that every request the
// operator makes is authorized as in a cluster and a verb missing from
// deploy/rbac.yaml fails the test that needs it.
//
//   SS_ASSERT_OK(testing::LoadOperatorRbac(*api_));
//   SS_ASSERT_OK(api_->WriteKubeconfig(path, "default", testing::kOperatorUser));
//   ... run the operator (Lease in kOperatorNamespace) ...
//   EXPECT_THAT(testing::ForbiddenRequests(*api_), ::testing::IsEmpty());
#ifndef SHADOWSYNC_TESTS_OPERATOR_OPERATOR_RBAC_H_
#define SHADOWSYNC_TESTS_OPERATOR_OPERATOR_RBAC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::testing {

// Where deploy/operator.yaml runs the operator, and its Lease's namespace
// (deploy/rbac.yaml grants Leases there only).
inline constexpr char kOperatorNamespace[] = "shadowsync-system";
inline constexpr char kOperatorUser[] =
    "system:serviceaccount:shadowsync-system:shadowsync-operator";

// Creates namespace kOperatorNamespace (unless it exists) and applies
// deploy/rbac.yaml.
inline absl::Status LoadOperatorRbac(FakeKubeApiServer& api) {
  const absl::Status ns =
      api.Create("/api/v1/namespaces", {{"apiVersion", "v1"},
                                        {"kind", "Namespace"},
                                        {"metadata", {{"name", kOperatorNamespace}}}})
          .status();
  if (!ns.ok() && !absl::IsAlreadyExists(ns)) return ns;
  return api.ApplyFile(SourcePath("deploy/rbac.yaml"));
}

// "user METHOD path?query" for every HTTP request the fake answered 403 so
// far, for a test's failure message.
inline std::vector<std::string> ForbiddenRequests(const FakeKubeApiServer& api) {
  std::vector<std::string> out;
  for (const FakeKubeApiServer::Request& r : api.Requests()) {
    if (r.status != 403) continue;
    out.push_back(
        absl::StrCat(r.user, " ", r.method, " ", r.path, r.query.empty() ? "" : "?", r.query));
  }
  return out;
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_OPERATOR_OPERATOR_RBAC_H_
