#include "operator/informer.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace shadowsync::kube {

Informer::Informer(KubeClient* client, std::string collection_path, std::string label_selector,
                   InformerOptions options)
    : client_(client),
      collection_path_(std::move(collection_path)),
      label_selector_(std::move(label_selector)),
      options_(std::move(options)) {}

Informer::~Informer() { Stop(); }

void Informer::AddEventHandler(ResourceEventHandlers handlers) {
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::HasSynced() const {
  MutexLock lock(&mu_);
  return synced_;
}

bool Informer::WaitForSync(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return synced_; },
                              timeout);
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  return GetByKey(ns.empty() ? name : ns + "/" + name);
}

std::optional<Json> Informer::GetByKey(const std::string& key) const {
  MutexLock lock(&mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::ListCached() const {
  MutexLock lock(&mu_);
  std::vector<Json> out;
  out.reserve(cache_.size());
  for (const auto& [key, object] : cache_) out.push_back(object);
  return out;
}

std::string Informer::last_resource_version() const {
  MutexLock lock(&mu_);
  return last_rv_;
}

Informer::Stats Informer::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void Informer::Deliver(const std::string& type, const Json* old_object, const Json& object) {
  for (const ResourceEventHandlers& h : handlers_) {
    if (type == "ADDED" && h.on_add) h.on_add(object);
    if (type == "MODIFIED" && h.on_update) h.on_update(*old_object, object);
    if (type == "DELETED" && h.on_delete) h.on_delete(object);
  }
}

absl::Status Informer::ListAndReplace() {
  ListOptions list_options;
  list_options.label_selector = label_selector_;
  list_options.field_selector = options_.field_selector;
  // resourceVersion "" (a consistent read), also for the first list: after a
  // 410 the cache must not go back in time.
  absl::StatusOr<ListResult> list = client_->List(collection_path_, list_options);
  if (!list.ok()) return list.status();

  std::map<std::string, Json> fresh;
  for (Json& item : list->items) {
    std::string key = ObjectKey(item);
    fresh.emplace(std::move(key), std::move(item));
  }
  std::map<std::string, Json> old;
  {
    MutexLock lock(&mu_);
    old = std::move(cache_);
    cache_ = fresh;
    last_rv_ = list->resource_version;
    ++stats_.lists;
  }
  // The difference, as the watch would have delivered it.
  for (const auto& [key, object] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) {
      Deliver("ADDED", nullptr, object);
    } else if (ResourceVersionOf(it->second) != ResourceVersionOf(object)) {
      Deliver("MODIFIED", &it->second, object);
    }
  }
  for (const auto& [key, object] : old) {
    if (!fresh.contains(key)) Deliver("DELETED", nullptr, object);
  }
  MutexLock lock(&mu_);
  synced_ = true;
  return absl::OkStatus();
}

absl::Status Informer::WatchOnce() {
  static thread_local absl::BitGen gen;
  const int64_t min_s = std::max<int64_t>(1, absl::ToInt64Seconds(options_.min_watch_timeout));
  const int64_t max_s = std::max(min_s, absl::ToInt64Seconds(options_.max_watch_timeout));
  WatchOptions watch_options;
  watch_options.label_selector = label_selector_;
  watch_options.field_selector = options_.field_selector;
  watch_options.allow_bookmarks = true;
  watch_options.timeout_seconds = absl::Uniform<int64_t>(absl::IntervalClosed, gen, min_s, max_s);
  {
    MutexLock lock(&mu_);
    watch_options.resource_version = last_rv_;
    ++stats_.watches;
  }
  return client_->Watch(
      collection_path_, watch_options,
      [this](const WatchEvent& event) {
        const std::string rv = ResourceVersionOf(event.object);
        if (event.type == "BOOKMARK") {
          MutexLock lock(&mu_);
          if (!rv.empty()) last_rv_ = rv;
          return true;
        }
        const std::string key = ObjectKey(event.object);
        std::optional<Json> old;
        {
          MutexLock lock(&mu_);
          auto it = cache_.find(key);
          if (it != cache_.end()) old = it->second;
          if (event.type == "DELETED") {
            cache_.erase(key);
          } else if (event.type == "ADDED" || event.type == "MODIFIED") {
            cache_[key] = event.object;
          }
          if (!rv.empty()) last_rv_ = rv;
        }
        if (event.type == "DELETED") {
          Deliver("DELETED", nullptr, event.object);
        } else if (event.type == "ADDED" || event.type == "MODIFIED") {
          // What the cache knew decides add vs update, so a replayed ADDED
          // of a cached object is an update.
          if (old) {
            Deliver("MODIFIED", &*old, event.object);
          } else {
            Deliver("ADDED", nullptr, event.object);
          }
        }
        return true;
      },
      &cancel_);
}

void Informer::Run() {
  static thread_local absl::BitGen gen;
  absl::Duration backoff = options_.initial_backoff;
  auto sleep_backoff = [&] {
    // Full jitter on top of the base, as client-go's (800 ms, 2x, jitter 1).
    const absl::Duration d = backoff * absl::Uniform(gen, 1.0, 2.0);
    backoff = std::min(backoff * 2, options_.max_backoff);
    return cancel_.SleepFor(d);
  };
  bool need_list = true;
  while (!cancel_.cancelled()) {
    if (need_list) {
      const absl::Status listed = ListAndReplace();
      if (!listed.ok()) {
        LOG(WARNING) << "kube informer " << collection_path_ << ": list failed: " << listed;
        if (!sleep_backoff()) break;
        continue;
      }
      need_list = false;
      backoff = options_.initial_backoff;
    }
    const absl::Time started = absl::Now();
    const std::string rv_before = last_resource_version();
    const absl::Status watched = WatchOnce();
    if (cancel_.cancelled()) break;
    const bool progressed = last_resource_version() != rv_before;
    if (watched.ok()) {
      // Ended by the server's timeoutSeconds: watch again from the last RV.
      // A stream that ends at once without news is treated as a failure so a
      // misbehaving server is not hammered.
      if (progressed || absl::Now() - started >= absl::Seconds(1)) {
        backoff = options_.initial_backoff;
        continue;
      }
      if (!sleep_backoff()) break;
      continue;
    }
    if (absl::IsOutOfRange(watched)) {
      // History compacted past our RV: only a new LIST can resync.
      LOG(INFO) << "kube informer " << collection_path_
                << ": watch expired, relisting: " << watched;
      MutexLock lock(&mu_);
      ++stats_.relists_after_expiry;
      need_list = true;
      continue;
    }
    LOG(WARNING) << "kube informer " << collection_path_ << ": watch failed, re-watching from "
                 << last_resource_version() << ": " << watched;
    if (progressed) backoff = options_.initial_backoff;
    if (!sleep_backoff()) break;
  }
}

}  // namespace shadowsync::kube
