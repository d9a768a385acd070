#include "serving/model_source.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/export.h"

namespace shadowsync::serving {
namespace {

namespace fs = std::filesystem;

// The export `path` is or names, and its manifest's identity.
absl::StatusOr<ModelSource::Stamp> Resolve(const std::string& path) {
  ModelSource::Stamp stamp{.dir = path};
  struct stat st;
  if (::stat((path + "/manifest.json").c_str(), &st) != 0) {
    std::ifstream latest(path + "/LATEST");
    if (!latest) {
      return absl::NotFoundError(absl::StrCat(
          path, ": neither an export (no manifest.json) nor a directory of exports (no LATEST)"));
    }
    std::stringstream name;
    name << latest.rdbuf();
    const std::string trimmed(absl::StripAsciiWhitespace(name.str()));
    if (trimmed.empty() || trimmed.find('/') != std::string::npos || trimmed == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "/LATEST: '", trimmed, "' is not the name of an export beside it"));
    }
    stamp.dir = absl::StrCat(path, "/", trimmed);
    if (::stat((stamp.dir + "/manifest.json").c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(path, "/LATEST names ", trimmed, ", but ", stamp.dir,
                                              "/manifest.json: ", std::strerror(errno)));
    }
  }
  stamp.inode = static_cast<uint64_t>(st.st_ino);
  stamp.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return stamp;
}

absl::Time Exported(const ModelSource::Stamp& stamp) { return absl::FromUnixNanos(stamp.mtime_ns); }

// Past this many deltas over the export loaded whole, the next one loads
// whole (its chain from disk) instead: each delta costs every lookup a probe.
constexpr int kMaxDeltas = 8;

// The model at `dir`, which replaces `current`: `current` with the deltas
// from it to `dir` applied, when `dir` is a chain of delta exports over it;
// else loaded whole.
absl::StatusOr<std::unique_ptr<Scorer>> Next(const Scorer& current, const std::string& dir,
                                             const ScorerOptions& options) {
  const fs::path served = fs::path(current.dir()).lexically_normal();
  std::vector<std::string> chain;  // Newest first.
  for (std::string at = dir; fs::path(at).lexically_normal() != served;) {
    absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(at);
    if (!reader.ok() || !reader->is_delta() ||
        current.num_deltas() + static_cast<int>(chain.size()) >= kMaxDeltas) {
      return Scorer::Load(dir, options);
    }
    chain.push_back(at);
    at = reader->BaseDir();
  }
  // An export replaced in place (the same directory) loads whole too.
  if (chain.empty()) return Scorer::Load(dir, options);
  return current.WithDeltas({chain.rbegin(), chain.rend()});
}

}  // namespace

ModelSource::ModelSource(std::string path, ModelSourceOptions options)
    : path_(std::move(path)), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<ModelSource>> ModelSource::Open(std::string path,
                                                               ModelSourceOptions options) {
  std::unique_ptr<ModelSource> source(new ModelSource(std::move(path), std::move(options)));
  SS_ASSIGN_OR_RETURN(Stamp stamp, Resolve(source->path_));
  SS_ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer,
                      Scorer::Load(stamp.dir, source->options_.scorer));
  if (source->options_.on_load) source->options_.on_load(*scorer, Exported(stamp));
  {
    MutexLock lock(&source->refresh_mu_);
    source->loaded_ = std::move(stamp);
  }
  {
    MutexLock lock(&source->mu_);
    source->current_ = std::move(scorer);
  }
  if (source->options_.poll > absl::ZeroDuration()) {
    source->poller_ = std::thread([s = source.get()] { s->Poll(); });
  }
  return source;
}

ModelSource::~ModelSource() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
}

std::shared_ptr<const Scorer> ModelSource::Current() const {
  ReaderMutexLock lock(&mu_);
  return current_;
}

absl::StatusOr<bool> ModelSource::Refresh() {
  MutexLock refresh(&refresh_mu_);
  absl::StatusOr<Stamp> stamp = Resolve(path_);
  // LATEST between a rename and its new export's commit, or an export being
  // replaced: the next poll sees the settled state.
  if (!stamp.ok()) return stamp.status();
  if (*stamp == loaded_ || *stamp == failed_) return false;
  absl::StatusOr<std::unique_ptr<Scorer>> scorer = Next(*Current(), stamp->dir, options_.scorer);
  if (!scorer.ok()) {
    failed_ = *stamp;
    return scorer.status();
  }
  if (options_.on_load) options_.on_load(**scorer, Exported(*stamp));
  loaded_ = *std::move(stamp);
  std::shared_ptr<const Scorer> old;
  {
    MutexLock lock(&mu_);
    old = std::exchange(current_, std::move(*scorer));
  }
  // `old` is freed here, or by the last request still scoring with it.
  return true;
}

void ModelSource::Poll() {
  std::string last_error;  // Logged once, not every poll.
  while (true) {
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; },
                           options_.poll);
      if (stopping_) return;
    }
    absl::StatusOr<bool> swapped = Refresh();
    if (!swapped.ok()) {
      if (swapped.status().ToString() == last_error) continue;
      last_error = swapped.status().ToString();
      LOG(ERROR) << "serve: keeping the model served; cannot load the newer one: " << last_error;
      if (options_.on_load_failure) options_.on_load_failure(swapped.status());
      continue;
    }
    last_error.clear();
    if (*swapped) {
      const std::shared_ptr<const Scorer> scorer = Current();
      LOG(INFO) << "serve: swapped in " << scorer->dir() << " (" << scorer->info().examples_trained
                << " examples trained)";
    }
  }
}

}  // namespace shadowsync::serving
