// The model `shadowsync serve` scores, kept fresh: a newer export is loaded
// in the background and swapped in atomically. Requests hold the model they
// were parsed against (a shared_ptr) until answered, so a swap neither fails
// nor blocks one; the old model is freed when its last request is.
//
// `path` is an export, or a directory of exports whose LATEST file names the
// one to serve (a job's exports directory, docs/export.md). The source polls
// it: a changed LATEST, or an export replaced in place (train --save-model
// over the same directory), is loaded and swapped in. An export that fails
// to load is logged and skipped until it changes; the model already served
// stays.
//
//   SS_ASSIGN_OR_RETURN(auto source, ModelSource::Open("runs/j/exports", {}));
//   std::shared_ptr<const Scorer> scorer = source->Current();
//
// Thread-safe.
#ifndef SHADOWSYNC_SERVING_MODEL_SOURCE_H_
#define SHADOWSYNC_SERVING_MODEL_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "serving/scorer.h"

namespace shadowsync::serving {

struct ModelSourceOptions {
  ScorerOptions scorer;
  // How often the path is checked for a newer export; zero: never (Refresh
  // only).
  absl::Duration poll = absl::Seconds(2);
  // Called after each load, the first included, with the model and the time
  // its export was committed (its manifest's mtime). On the polling thread
  // after the first; must not call back into the source.
  std::function<void(const Scorer& scorer, absl::Time exported)> on_load;
  // Called when polling finds a newer export it cannot load (once per
  // distinct error, as it is logged).
  std::function<void(const absl::Status& error)> on_load_failure;
};

class ModelSource {
 public:
  // Loads the export `path` is or names. NotFound if it is neither an
  // export nor a directory with LATEST; Scorer::Load's errors otherwise.
  static absl::StatusOr<std::unique_ptr<ModelSource>> Open(std::string path,
                                                           ModelSourceOptions options);
  // Stops polling; waits for a load in progress.
  ~ModelSource();

  ModelSource(const ModelSource&) = delete;
  ModelSource& operator=(const ModelSource&) = delete;

  // The model to score a new request with.
  std::shared_ptr<const Scorer> Current() const;

  // Checks the path now and swaps in a changed export. True if it swapped;
  // false if nothing changed or the change was already found unloadable;
  // the load's error if it failed (the served model stays).
  absl::StatusOr<bool> Refresh();

  const std::string& path() const { return path_; }

  // Which export a path names, and which commit of it: an export replaced in
  // place gets a new manifest inode.
  struct Stamp {
    std::string dir;
    uint64_t inode = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };

 private:
  ModelSource(std::string path, ModelSourceOptions options);
  void Poll();

  const std::string path_;
  const ModelSourceOptions options_;
  // Serializes Refresh (the poller's and callers').
  Mutex refresh_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Stamp loaded_ ABSL_GUARDED_BY(refresh_mu_);
  Stamp failed_ ABSL_GUARDED_BY(refresh_mu_);
  mutable Mutex mu_;
  std::shared_ptr<const Scorer> current_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_MODEL_SOURCE_H_
