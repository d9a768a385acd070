// Requests to `shadowsync serve`'s KServe v2 HTTP port, for the tests that
// run it (tests/cli/serve_e2e_test.cc, tests/operator/operator_e2e_test.cc).
#ifndef SHADOWSYNC_TESTS_UTIL_SERVE_REQUESTS_H_
#define SHADOWSYNC_TESTS_UTIL_SERVE_REQUESTS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/util/http_get.h"

namespace shadowsync::testing {

// An infer request of lines[begin, end) as the "lines" input (Criteo TSV).
inline nlohmann::json LinesRequest(const std::vector<std::string>& lines, size_t begin,
                                   size_t end) {
  return {{"inputs",
           {{{"name", "lines"},
             {"datatype", "BYTES"},
             {"shape", {end - begin}},
             {"data", std::vector<std::string>(lines.begin() + begin, lines.begin() + end)}}}}};
}

// POSTs `request` to model "ctr" on 127.0.0.1:`port` and returns the export
// that scored it, its probabilities into `probs`: the served model's
// "export" parameter, read before and after the request and the same both
// times (a swap in between: again). "" with the reason in `error` if an
// answer is not 200, or the model changed under 20 requests in a row.
inline std::string ScoreWithOneExport(int port, const std::string& request,
                                      std::vector<float>* probs, std::string* error) {
  using nlohmann::json;
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::string before, answer, after;
    if (HttpGet(port, "/v2/models/ctr", &before) != 200 ||
        HttpPost(port, "/v2/models/ctr/infer", request, &answer) != 200 ||
        HttpGet(port, "/v2/models/ctr", &after) != 200) {
      *error = "not answered 200: " + before + answer + after;
      return "";
    }
    const json served = json::parse(before)["parameters"];
    if (served != json::parse(after)["parameters"]) continue;
    *probs = json::parse(answer)["outputs"][0]["data"].get<std::vector<float>>();
    return served["export"].get<std::string>();
  }
  *error = "the model changed under every request";
  return "";
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_SERVE_REQUESTS_H_
