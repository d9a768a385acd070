#include "worker/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <iterator>
#include <optional>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/dense_ops.h"
#include "model/sparse_batch.h"
#include "worker/background_call.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU time of every thread of this process, so a report shows how many cores a
// run really used.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

// Hands out batches of consecutive examples to any number of threads, either
// from one preloaded block or straight from a streaming reader.
class Trainer::BatchSource {
 public:
  static absl::StatusOr<std::unique_ptr<BatchSource>> Open(const std::vector<std::string>& paths,
                                                           ReaderOptions reader_options,
                                                           int64_t max_examples, bool preload,
                                                           int batch_size) {
    reader_options.max_examples = max_examples;
    auto source = std::unique_ptr<BatchSource>(new BatchSource(batch_size));
    MutexLock lock(&source->mu_);
    if (preload) {
      ReaderStats stats;
      SS_ASSIGN_OR_RETURN(ExampleBlock all, ReadAllExamples(paths, reader_options, &stats));
      source->stats_ = stats;
      source->total_ = all.size();
      source->current_ = std::make_shared<const ExampleBlock>(std::move(all));
    } else {
      SS_ASSIGN_OR_RETURN(source->reader_, CriteoReader::Open(paths, reader_options));
    }
    return source;
  }

  // The next batch: up to batch_size examples [*begin, *end) of *block, the
  // first being example *position of the whole input. Returns false when the
  // input is exhausted.
  absl::StatusOr<bool> Next(std::shared_ptr<const ExampleBlock>* block, int64_t* begin,
                            int64_t* end, int64_t* position = nullptr, int batch_size = 0) {
    if (batch_size <= 0) batch_size = batch_size_;
    MutexLock lock(&mu_);
    while (current_ == nullptr || pos_ >= current_->size() || skip_ > 0) {
      if (current_ != nullptr && pos_ < current_->size()) {
        const int64_t skipped = std::min<int64_t>(skip_, current_->size() - pos_);
        pos_ += skipped;
        skip_ -= skipped;
        served_ += skipped;
        continue;
      }
      if (reader_ == nullptr) return false;
      ExampleBlock next;
      SS_ASSIGN_OR_RETURN(bool more, reader_->Next(&next));
      stats_ = reader_->stats();
      if (!more) {
        reader_.reset();
        return false;
      }
      current_ = std::make_shared<const ExampleBlock>(std::move(next));
      pos_ = 0;
    }
    *block = current_;
    *begin = pos_;
    pos_ = std::min<int64_t>(pos_ + batch_size, current_->size());
    *end = pos_;
    if (position != nullptr) *position = served_;
    served_ += *end - *begin;
    return true;
  }

  int64_t total() const {
    MutexLock lock(&mu_);
    return total_;
  }
  void Skip(int64_t examples) {
    MutexLock lock(&mu_);
    skip_ = examples;
  }
  ReaderStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  explicit BatchSource(int batch_size) : batch_size_(batch_size) {}

  const int batch_size_;
  mutable Mutex mu_;
  std::unique_ptr<CriteoReader> reader_ ABSL_GUARDED_BY(mu_);  // null when preloaded or done
  std::shared_ptr<const ExampleBlock> current_ ABSL_GUARDED_BY(mu_);
  int64_t pos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t served_ ABSL_GUARDED_BY(mu_) = 0;  // Examples handed out (or skipped) so far.
  int64_t skip_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_ ABSL_GUARDED_BY(mu_) = -1;
  ReaderStats stats_ ABSL_GUARDED_BY(mu_);
};

// One batch and its unique embedding rows, reused from batch to batch.
struct Trainer::Batch {
  explicit Batch(int num_tables) : sparse(num_tables) {}

  std::shared_ptr<const ExampleBlock> block;
  int64_t begin = 0, end = 0;  // Examples [begin, end) of *block.
  model::SparseBatch sparse;
};

// Everything one worker thread reuses from batch to batch.
struct Trainer::ThreadState {
  ThreadState(int index, const model::Dlrm& model, int batch_size, int num_tables,
              model::DensePrecision precision, model::GemmKernel gemm)
      : index(index),
        ws(model.NewWorkspace(batch_size, precision, gemm)),
        params(model.num_params()),
        dense_grad(model.num_params()),
        probs(batch_size),
        batches{Batch(num_tables), Batch(num_tables)},
        row_grads(num_tables),
        sparse(num_tables),
        straggle_rng(0x5eed + index) {}

  const int index;  // Of the thread, in [0, threads).
  std::unique_ptr<model::Dlrm::Workspace> ws;
  std::vector<float> params;  // Private snapshot of the shared replica.
  std::vector<float> dense_grad;
  std::vector<float> probs;
  Batch batches[2];  // The current one, and the next one while it is prefetched.
  std::vector<model::TableRows> row_grads;  // Summed gradients of the current batch's rows.
  std::vector<model::SparseInput> sparse;
  model::BatchView batch;
  std::mt19937_64 straggle_rng;
  std::optional<std::chrono::steady_clock::time_point> last_step_end;
  double sync_blocked_at_end = 0;  // The sync strategy's blocked seconds then.
};

Trainer::Trainer(model::DlrmConfig config, std::vector<model::EmbeddingTableConfig> tables,
                 TrainerOptions options, model::EmbeddingStore* store)
    : model_(std::move(config)),
      tables_(std::move(tables)),
      options_(std::move(options)),
      gemm_(model::ResolveGemmKernel(model_.GemmShapes(options_.batch_size), options_.gemm)),
      store_(store),
      params_(model_.num_params()),
      dense_state_(model_.num_params() * model::StateFloatsPerParam(options_.optimizer.kind)),
      gate_(/*serialised=*/options_.threads == 1) {
  LOG(INFO) << "fp32 GEMM: " << gemm_.Summary();
  model_.InitParams(options_.seed, params_);
}

Trainer::~Trainer() = default;

void Trainer::CollectRows(std::shared_ptr<const ExampleBlock> block, int64_t begin, int64_t end,
                          Batch& batch) const {
  batch.sparse.Collect(*block, begin, end, tables_);
  batch.block = std::move(block);
  batch.begin = begin;
  batch.end = end;
}

void Trainer::BindBatch(Batch& batch, ThreadState& ts) const {
  batch.sparse.Bind(ts.sparse);
  const ExampleBlock& block = *batch.block;
  ts.batch = model::BatchView{static_cast<int>(batch.end - batch.begin),
                              block.dense.data() + batch.begin * block.num_dense,
                              block.labels.data() + batch.begin, ts.sparse};
}

void Trainer::Straggle(std::chrono::steady_clock::time_point step_start, ThreadState& ts) const {
  absl::Duration pause = options_.step_delay;
  if (options_.step_jitter > absl::ZeroDuration()) {
    pause += options_.step_jitter * std::uniform_real_distribution<double>(0, 1)(ts.straggle_rng);
  }
  // The whole iteration since the last one ended (reading, lookups,
  // compute, updates, push) less the time it waited on sync: a slower
  // machine computes slower, its network and the others do not. The
  // strategy sums its threads' waits; this thread's share is taken as even.
  const auto now = std::chrono::steady_clock::now();
  const auto since = ts.last_step_end.has_value() ? *ts.last_step_end : step_start;
  if (options_.slowdown > 1) {
    const double blocked = options_.sync != nullptr ? options_.sync->stats().blocked_seconds : 0;
    const absl::Duration waited =
        absl::Seconds((blocked - ts.sync_blocked_at_end) / std::max(1, options_.threads));
    ts.sync_blocked_at_end = blocked;
    const absl::Duration busy = absl::FromChrono(now - since) - waited;
    if (busy > absl::ZeroDuration()) pause += busy * (options_.slowdown - 1);
  }
  if (pause > absl::ZeroDuration()) absl::SleepFor(pause);
  ts.last_step_end = std::chrono::steady_clock::now();
}

absl::Status Trainer::TrainStep(Batch& batch, ThreadState& ts) {
  const auto step_start = std::chrono::steady_clock::now();
  BindBatch(batch, ts);
  const int num_tables = model_.config().num_tables;
  model::Gradients grads;
  grads.dense = ts.dense_grad;
  for (int t = 0; t < num_tables; ++t) {
    ts.row_grads[t].ids = batch.sparse.rows()[t].ids;
    ts.row_grads[t].values.resize(batch.sparse.rows()[t].values.size());
    grads.rows.push_back(ts.row_grads[t].values);
  }
  SyncStrategy* const sync = options_.sync;
  model::OptimizerConfig optimizer = options_.optimizer;
  // Counted only through the warm-up: no shared write per step after it.
  if (warmup_steps_ > 0 && dense_steps_.load(std::memory_order_relaxed) <= warmup_steps_) {
    const int64_t step = dense_steps_.fetch_add(1, std::memory_order_relaxed);
    const float factor = model::WarmupFactor(step, warmup_steps_);
    lr_factor_.store(factor, std::memory_order_relaxed);
    optimizer.learning_rate *= factor;
  }
  if (options_.threads == 1) {
    // Nothing races with a lone thread (other threads wait for gate_): no
    // snapshot, and a vectorised update.
    model_.Step(params_.data(), ts.batch, ts.ws.get(), ts.probs.data(), &grads);
    if (sync != nullptr) {
      SS_RETURN_IF_ERROR(sync->ApplyGradient(ts.index, ts.dense_grad));
    } else {
      model::ApplyUpdateExclusive(optimizer, params_.data(), dense_state_.data(),
                                  ts.dense_grad.data(), model_.num_params());
    }
  } else {
    // Hogwild: compute on a private snapshot, then apply the update to the
    // shared replica without locks.
    model::CopyRelaxed(params_.data(), ts.params.data(), model_.num_params());
    model_.Step(ts.params.data(), ts.batch, ts.ws.get(), ts.probs.data(), &grads);
    if (sync != nullptr) {
      SS_RETURN_IF_ERROR(sync->ApplyGradient(ts.index, ts.dense_grad));
    } else {
      model::ApplyUpdateRelaxed(optimizer, params_.data(), dense_state_.data(),
                                ts.dense_grad.data(), model_.num_params());
    }
  }
  SS_RETURN_IF_ERROR(store_->Push(ts.row_grads));
  Straggle(step_start, ts);
  return sync != nullptr ? sync->AfterStep(ts.index) : absl::OkStatus();
}

absl::Status Trainer::RunWorkers(int count, const std::function<absl::Status(int)>& body,
                                 const std::function<void()>& tick) const {
  Mutex mu;
  absl::Status first_error;
  int running = count;
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      absl::Status s = body(i);
      MutexLock lock(&mu);
      if (!s.ok() && first_error.ok()) first_error = s;
      --running;
    });
  }
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return running == 0; };
  while (true) {
    {
      MutexLock lock(&mu);
      if (mu.AwaitWithTimeout(done, absl::Seconds(options_.progress_interval_seconds))) {
        break;
      }
    }
    tick();
  }
  for (auto& t : threads) t.join();
  return first_error;
}

LearningCheckOptions Trainer::LearningCheckAfterWarmup() const {
  LearningCheckOptions check = options_.learning_check;
  // The first judged window starts at after_examples / 2: not before the
  // warm-up's examples are past, when its small steps have had their effect.
  if (check.after_examples > 0) {
    check.after_examples = std::max(check.after_examples, 2 * warmup_steps_ * options_.batch_size);
  }
  return check;
}

absl::StatusOr<TrainReport> Trainer::Train(const std::vector<std::string>& paths) {
  const auto load_start = std::chrono::steady_clock::now();
  SS_ASSIGN_OR_RETURN(auto source, BatchSource::Open(paths, options_.reader, options_.max_examples,
                                                     options_.preload, options_.batch_size));
  source->Skip(options_.skip_examples);
  TrainReport report;
  report.gemm = gemm_;
  if (options_.preload) report.load_seconds = SecondsSince(load_start);

  // Accumulated Adagrad state already bounds the first steps.
  const bool fresh_state =
      std::all_of(dense_state_.begin(), dense_state_.end(), [](float s) { return s == 0; });
  warmup_steps_ = fresh_state ? options_.lr_warmup_steps : 0;
  dense_steps_.store(0, std::memory_order_relaxed);
  lr_factor_.store(model::WarmupFactor(0, warmup_steps_), std::memory_order_relaxed);

  // Progress shared by the workers; one lock per batch is noise next to a step.
  Mutex mu;
  RunningEntropy entropy;  // Guarded by mu, as are the four below.
  double interval_loss = 0;
  int64_t interval_examples = 0;
  LearningCheck learning(LearningCheckAfterWarmup());
  std::string learning_problem;
  std::atomic<bool> stop{false};
  if (options_.sync != nullptr) {
    SS_RETURN_IF_ERROR(options_.sync->Start(DenseReplica{params_, dense_state_, options_.optimizer,
                                                         options_.threads, &gate_, &lr_factor_}));
  }
  const int max_batch = options_.sync != nullptr ? options_.sync->MaxBatchSize(options_.batch_size)
                                                 : options_.batch_size;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  auto steps = [&](ThreadState& ts) -> absl::Status {
    // Fetches the next batch into *batch and, unless prefetching, looks its
    // rows up. Returns false at the end of the input.
    auto next = [&](Batch* batch) -> absl::StatusOr<bool> {
      std::shared_ptr<const ExampleBlock> block;
      int64_t begin, end;
      const int batch_size = options_.sync != nullptr
                                 ? options_.sync->BatchSize(options_.batch_size)
                                 : options_.batch_size;
      SS_ASSIGN_OR_RETURN(bool more,
                          source->Next(&block, &begin, &end, /*position=*/nullptr, batch_size));
      if (!more) return false;
      CollectRows(std::move(block), begin, end, *batch);
      return true;
    };
    BackgroundCall prefetch;  // Ends before ts, whose rows it may be filling.
    int current = 0;
    SS_ASSIGN_OR_RETURN(bool have, next(&ts.batches[current]));
    if (have) SS_RETURN_IF_ERROR(store_->Lookup(ts.batches[current].sparse.rows()));
    while (have && !stop.load(std::memory_order_relaxed)) {
      Batch& batch = ts.batches[current];
      Batch& upcoming = ts.batches[1 - current];
      SS_ASSIGN_OR_RETURN(bool more, next(&upcoming));
      const bool prefetching = more && options_.prefetch;
      if (prefetching) {
        prefetch.Start([this, &rows = upcoming.sparse.rows()] { return store_->Lookup(rows); });
      }
      absl::Status step = TrainStep(batch, ts);
      gate_.Serve();
      absl::Status lookup = !more         ? absl::OkStatus()
                            : prefetching ? prefetch.Wait()
                                          : store_->Lookup(upcoming.sparse.rows());
      SS_RETURN_IF_ERROR(step);
      SS_RETURN_IF_ERROR(lookup);
      RunningEntropy batch_entropy;
      for (int64_t e = batch.begin; e < batch.end; ++e) {
        batch_entropy.Add(ts.probs[e - batch.begin], batch.block->labels[e]);
      }
      {
        MutexLock lock(&mu);
        entropy.Merge(batch_entropy);
        interval_loss += batch_entropy.logloss() * batch_entropy.count();
        interval_examples += batch_entropy.count();
        if (std::optional<std::string> problem = learning.Add(batch_entropy)) {
          LOG(WARNING) << *problem
                       << (options_.stop_when_not_learning ? "; stopping the training" : "");
          learning_problem = *std::move(problem);
          if (options_.stop_when_not_learning) stop = true;
        }
      }
      have = more;
      current = 1 - current;
    }
    return absl::OkStatus();
  };
  auto body = [&](int index) -> absl::Status {
    ThreadState ts(index, model_, max_batch, model_.config().num_tables, options_.precision,
                   gemm_.kernel);
    gate_.Open();
    absl::Status status = steps(ts);
    gate_.Close();
    if (!status.ok()) stop = true;
    // Never leave the other threads waiting for this one at a sync barrier.
    if (options_.sync != nullptr) options_.sync->ThreadDone(index);
    return status;
  };
  double last_tick = 0;
  auto tick = [&] {
    Progress p;
    p.total = source->total();
    p.seconds = SecondsSince(start);
    {
      MutexLock lock(&mu);
      p.examples = entropy.count();
      p.train_ne = entropy.ne();
      p.train_logloss = entropy.logloss();
      p.loss = interval_examples > 0 ? interval_loss / interval_examples : 0;
      p.examples_per_second = interval_examples / std::max(p.seconds - last_tick, 1e-9);
      p.learning_problem = learning_problem;
      interval_loss = 0;
      interval_examples = 0;
    }
    last_tick = p.seconds;
    if (options_.on_progress) options_.on_progress(p);
  };
  absl::Status trained = RunWorkers(options_.threads, body, tick);
  report.seconds = SecondsSince(start);
  report.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  if (options_.sync != nullptr) {
    absl::Status finished = options_.sync->Finish();
    report.sync_finish_seconds = SecondsSince(start) - report.seconds;
    if (trained.ok()) trained = finished;
  }
  SS_RETURN_IF_ERROR(trained);

  MutexLock lock(&mu);
  report.examples = entropy.count();
  report.examples_per_second = report.examples / std::max(report.seconds, 1e-9);
  report.train_ne = entropy.ne();
  report.train_logloss = entropy.logloss();
  report.learning_problem = learning_problem;
  const ReaderStats stats = source->stats();
  report.malformed_lines = stats.malformed;
  report.first_errors = stats.first_errors;
  return report;
}

absl::StatusOr<QualityReport> Trainer::Evaluate(const std::vector<std::string>& paths) {
  return EvaluateParams(params_.data(), paths, /*max_examples=*/-1, options_.threads);
}

absl::StatusOr<QualityReport> Trainer::EvaluateSnapshot(const std::vector<std::string>& paths,
                                                        int64_t max_examples) const {
  std::vector<float> snapshot(params_.size());
  gate_.Run([&] {
    model::CopyRelaxed(params_.data(), snapshot.data(), static_cast<long>(snapshot.size()));
  });
  return EvaluateParams(snapshot.data(), paths, max_examples, /*threads=*/1);
}

void Trainer::SnapshotDense(std::vector<float>* params, std::vector<float>* dense_state) const {
  params->resize(params_.size());
  dense_state->resize(dense_state_.size());
  gate_.Run([&] {
    model::CopyRelaxed(params_.data(), params->data(), static_cast<long>(params_.size()));
    model::CopyRelaxed(dense_state_.data(), dense_state->data(),
                       static_cast<long>(dense_state_.size()));
  });
}

absl::StatusOr<QualityReport> Trainer::EvaluateParams(const float* params,
                                                      const std::vector<std::string>& paths,
                                                      int64_t max_examples, int threads) const {
  // Every example of the held-out files, whatever share this trainer trains on.
  ReaderOptions reader = options_.reader;
  reader.shard_index = 0;
  reader.num_shards = 1;
  SS_ASSIGN_OR_RETURN(auto source, BatchSource::Open(paths, reader, max_examples,
                                                     /*preload=*/false, options_.batch_size));
  // Scored batches, keyed by their position in the input so the metrics are
  // summed in file order whatever thread scored which batch.
  struct Scored {
    int64_t position;
    std::vector<float> probs, labels;
  };
  std::vector<std::vector<Scored>> scored(threads);
  auto body = [&](int i) -> absl::Status {
    ThreadState ts(i, model_, options_.batch_size, model_.config().num_tables, options_.precision,
                   gemm_.kernel);
    std::shared_ptr<const ExampleBlock> block;
    int64_t begin, end, position;
    while (true) {
      SS_ASSIGN_OR_RETURN(bool more, source->Next(&block, &begin, &end, &position));
      if (!more) return absl::OkStatus();
      CollectRows(block, begin, end, ts.batches[0]);
      SS_RETURN_IF_ERROR(store_->Lookup(ts.batches[0].sparse.rows()));
      BindBatch(ts.batches[0], ts);
      ts.batch.labels = nullptr;
      model_.Step(params, ts.batch, ts.ws.get(), ts.probs.data(), nullptr);
      scored[i].push_back(
          {position, std::vector<float>(ts.probs.begin(), ts.probs.begin() + (end - begin)),
           std::vector<float>(block->labels.begin() + begin, block->labels.begin() + end)});
    }
  };
  SS_RETURN_IF_ERROR(RunWorkers(threads, body, [] {}));
  std::vector<Scored> batches;
  for (auto& per_thread : scored)
    std::move(per_thread.begin(), per_thread.end(), std::back_inserter(batches));
  std::sort(batches.begin(), batches.end(),
            [](const Scored& a, const Scored& b) { return a.position < b.position; });
  std::vector<float> all_probs, all_labels;
  for (const Scored& b : batches) {
    all_probs.insert(all_probs.end(), b.probs.begin(), b.probs.end());
    all_labels.insert(all_labels.end(), b.labels.begin(), b.labels.end());
  }
  if (all_labels.empty()) {
    return absl::InvalidArgumentError("evaluation data holds no valid examples");
  }
  return shadowsync::Evaluate(all_probs, all_labels);
}

}  // namespace shadowsync::worker
