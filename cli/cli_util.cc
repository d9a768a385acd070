#include "cli/cli_util.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/synthetic.h"

namespace shadowsync::cli {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnStopSignal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Async-signal-safe; a full pipe only means a signal is already pending.
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
}

}  // namespace

bool InstallStopSignals() {
  if (pipe(g_signal_pipe) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return true;
}

int AwaitStopSignal() {
  unsigned char sig = 0;
  while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  return sig;
}

void WakeStopWatcher() {
  const unsigned char wake = 0;
  if (write(g_signal_pipe[1], &wake, 1) < 0) {
  }
}

bool WriteReadyFile(const std::string& path, int grpc_port, int metrics_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << grpc_port << " " << metrics_port << "\n";
    if (!out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

std::vector<std::string> SplitList(const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (const auto& f : flags) {
    for (absl::string_view p : absl::StrSplit(f, ',', absl::SkipEmpty())) out.emplace_back(p);
  }
  return out;
}

namespace {

// Writes the first `keep` lines of `in` to `head` and the rest to `tail`.
absl::Status SplitLines(const std::string& in, int64_t keep, const std::string& head,
                        const std::string& tail) {
  std::ifstream src(in);
  std::ofstream a(head), b(tail);
  if (!src || !a || !b) return absl::UnavailableError(absl::StrCat("cannot split ", in));
  std::string line;
  for (int64_t i = 0; std::getline(src, line); ++i) (i < keep ? a : b) << line << '\n';
  if (!a.flush() || !b.flush()) return absl::UnavailableError(absl::StrCat("cannot split ", in));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobData> PrepareJobData(const JobSpec& spec, const std::string& dir) {
  JobData data;
  if (spec.data.format == DataFormat::kCriteoTsv) {
    data.train = spec.data.paths;
    data.eval = spec.data.eval_paths;
    return data;
  }
  const SyntheticDataSpec& synth = spec.data.synthetic;
  data.train = {dir + "/train.tsv"};
  data.eval = {dir + "/eval.tsv"};
  data.train_examples = synth.examples;
  // The generator is deterministic: files named after its inputs are reused.
  const std::string stamp = absl::StrCat(dir, "/synthetic-", synth.examples, "-",
                                         synth.eval_examples, "-", synth.seed, ".done");
  if (std::filesystem::exists(stamp)) return data;
  std::filesystem::create_directories(dir);
  const std::string all = dir + "/synthetic.tsv";
  SyntheticOptions gen;
  gen.out_path = all;
  gen.examples = synth.examples + synth.eval_examples;
  gen.seed = static_cast<uint64_t>(synth.seed);
  std::cerr << "generating " << gen.examples << " synthetic examples into " << all << "\n";
  SS_ASSIGN_OR_RETURN(TeacherReport teacher, GenerateSynthetic(gen));
  std::cerr << absl::StrFormat("teacher: ctr %.4f ne %.4f auc %.4f\n", teacher.ctr, teacher.ne,
                               teacher.auc);
  SS_RETURN_IF_ERROR(SplitLines(all, synth.examples, data.train[0], data.eval[0]));
  std::filesystem::remove(all);
  std::ofstream(stamp) << "ok\n";
  return data;
}

}  // namespace shadowsync::cli
