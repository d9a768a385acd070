// The durability promise of docs/durability.md, against the real binary:
// every acknowledged push survives a SIGKILL of `shadowsync ps`, with or
// without --sync-writes (which adds an fdatasync per push, for machine
// crashes), bit-identically, and a push in flight is applied entirely or not
// at all. A client pushes a load while the test kills the
// server mid-load; the server restarts on the same --db and every row must
// equal an oracle that replays exactly the acknowledged pushes — or those plus
// the one push in flight at the kill, which the server may have applied
// before dying but never acknowledged (all-or-nothing either way).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "model/embedding_table.h"
#include "ps/client/ps_client.h"
#include "tests/util/embedding_tables.h"
#include "tests/util/test_util.h"

#if defined(__SANITIZE_THREAD__)
// tests/ps/tsan_suppressions.cc; handed to the TSAN-built child as well.
extern "C" const char* __tsan_default_suppressions();
#endif

namespace shadowsync {
namespace {

constexpr int kDim = 8;
constexpr int kTables = 4;
constexpr uint64_t kBuckets = 5000;
constexpr uint64_t kIdRange = 3000;  // Rows are pushed many times each.
constexpr int kIdsPerTable = 32;
constexpr int kAckedBeforeKill = 400;

std::vector<model::EmbeddingTableConfig> Tables() {
  return testing::NumberedTables(kTables, kBuckets, "table");
}

// One `shadowsync ps` child process.
class PsProcess {
 public:
  PsProcess(const std::string& db, const std::string& dir, const std::string& name,
            bool sync_writes) {
    ready_ = dir + "/" + name + ".ready";
    log_ = dir + "/" + name + ".log";
    std::vector<std::string> args = {testing::BinDir() + "/shadowsync",
                                     "ps",
                                     "--listen=127.0.0.1:0",
                                     "--metrics-listen=127.0.0.1:0",
                                     "--db=" + db,
                                     "--dim=" + std::to_string(kDim),
                                     "--tables=" + std::to_string(kTables),
                                     "--hash-buckets=" + std::to_string(kBuckets),
                                     "--slots=256",
                                     "--cache-bytes=1048576",
                                     "--ready-file=" + ready_};
    if (sync_writes) args.push_back("--sync-writes");
    // Under TSAN, this binary's suppressions for the child, which reports
    // the same uninstrumented-library false positives.
    std::vector<std::string> env;
#if defined(__SANITIZE_THREAD__)
    const std::string supp = dir + "/tsan.supp";
    testing::WriteFile(supp, __tsan_default_suppressions());
    const char* inherited = std::getenv("TSAN_OPTIONS");
    env.push_back(std::string("TSAN_OPTIONS=") + (inherited ? inherited : "") +
                  " history_size=7 suppressions=" + supp);
#endif
    absl::StatusOr<pid_t> pid = Spawn(
        args, {.env = env, .stdout_path = log_, .stderr_path = log_, .truncate_output = true});
    pid_ = pid.ok() ? *pid : -1;
  }
  ~PsProcess() { Kill(SIGKILL); }

  // Waits for the ready file; false if the process died or took over 60s.
  bool WaitReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (pid_ <= 0 || waitpid(pid_, nullptr, WNOHANG) != 0) return false;
      if (std::filesystem::exists(ready_)) {
        grpc_port_ = std::stoi(testing::ReadFile(ready_));
        return grpc_port_ > 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Polling a child process.
    }
    return false;
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  std::string log() const { return testing::ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  std::string ready_;
  std::string log_;
};

// `retries`: the pusher uses none, so nothing is sent after the kill: a
// retried push could reach another test process's server that has meanwhile
// bound the killed server's port.
std::unique_ptr<ps::PsClient> Connect(const std::string& address, int retries) {
  ps::PsClientOptions options;
  options.rpc_deadline = absl::Seconds(20);
  options.max_retries = retries;
  auto client = ps::PsClient::Connect(address, kDim, kTables, options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

using Push = std::vector<model::TableRows>;

// Replays `pushes` on a fresh oracle (the server's seed, optimizer and init).
std::unique_ptr<model::LocalEmbeddingStore> Replay(const std::vector<Push>& pushes) {
  auto oracle = std::make_unique<model::LocalEmbeddingStore>(
      model::LocalStoreOptions{.dim = kDim,
                               .tables = Tables(),
                               .optimizer = {model::OptimizerKind::kAdagrad, 0.02f},
                               .seed = 1});
  for (const Push& p : pushes) EXPECT_TRUE(oracle->Push(p).ok());
  return oracle;
}

// Rows of `ids` whose values differ between `got` and `oracle`; the first
// few are described in `first`.
int Mismatches(model::LocalEmbeddingStore& oracle, const std::vector<model::TableRows>& got,
               std::string* first) {
  std::vector<model::TableRows> want = got;
  EXPECT_TRUE(oracle.Lookup(want).ok());
  int bad = 0;
  for (int t = 0; t < kTables; ++t) {
    for (size_t i = 0; i < got[t].ids.size(); ++i) {
      for (int k = 0; k < kDim; ++k) {
        if (got[t].values[i * kDim + k] != want[t].values[i * kDim + k]) {  // Bit-identical.
          if (++bad <= 3) {
            *first += " (table " + std::to_string(t) + ", id " + std::to_string(got[t].ids[i]) +
                      ")[" + std::to_string(k) +
                      "] = " + std::to_string(got[t].values[i * kDim + k]) + " want " +
                      std::to_string(want[t].values[i * kDim + k]) + ";";
          }
          break;
        }
      }
    }
  }
  return bad;
}

class PsDurabilityTest : public ::testing::TestWithParam<bool> {
 protected:
  testing::ScratchDir dir_;
};

TEST_P(PsDurabilityTest, EveryAcknowledgedPushSurvivesSigkill) {
  const bool sync_writes = GetParam();
  const std::string db = dir_.File("db");
  auto first = std::make_unique<PsProcess>(db, dir_.path().string(), "first", sync_writes);
  ASSERT_TRUE(first->WaitReady()) << first->log();
  std::unique_ptr<ps::PsClient> client = Connect(first->address(), /*retries=*/0);
  ASSERT_NE(client, nullptr);

  // One pusher, so at most one push is in flight when the server dies.
  Mutex mu;
  std::vector<Push> acked;
  std::optional<Push> in_flight;
  bool stopped = false;
  std::thread pusher([&] {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
    for (int n = 0; n < 1'000'000; ++n) {
      Push push(kTables);
      for (auto& rows : push) {
        std::set<uint64_t> ids;
        while (static_cast<int>(ids.size()) < kIdsPerTable) ids.insert(rng() % kIdRange);
        rows.ids.assign(ids.begin(), ids.end());
        rows.values.resize(rows.ids.size() * kDim);
        for (float& v : rows.values) v = grad(rng);
      }
      const absl::Status status = client->Push(push);
      MutexLock lock(&mu);
      if (!status.ok()) {
        in_flight = push;  // Applied or not: unknown.
        stopped = true;
        return;
      }
      acked.push_back(std::move(push));
    }
    MutexLock lock(&mu);
    stopped = true;
  });
  {
    MutexLock lock(&mu);
    mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return stopped || static_cast<int>(acked.size()) >= kAckedBeforeKill;
    });
  }
  // Mid-load, at a random point of the next push's life (building, sending,
  // applying, acknowledging).
  std::this_thread::sleep_for(std::chrono::microseconds(std::random_device{}() % 3000));
  first->Kill(SIGKILL);
  pusher.join();
  ASSERT_TRUE(in_flight.has_value()) << "the load finished before the kill";
  ASSERT_GE(acked.size(), static_cast<size_t>(kAckedBeforeKill));

  PsProcess second(db, dir_.path().string(), "second", sync_writes);
  ASSERT_TRUE(second.WaitReady()) << second.log();
  std::unique_ptr<ps::PsClient> reader = Connect(second.address(), /*retries=*/3);
  ASSERT_NE(reader, nullptr);

  // Every row any push touched, as the restarted server has it.
  std::vector<model::TableRows> rows(kTables);
  std::vector<std::set<uint64_t>> touched(kTables);
  for (const Push& p : acked) {
    for (int t = 0; t < kTables; ++t) touched[t].insert(p[t].ids.begin(), p[t].ids.end());
  }
  for (int t = 0; t < kTables; ++t) {
    touched[t].insert((*in_flight)[t].ids.begin(), (*in_flight)[t].ids.end());
    rows[t].ids.assign(touched[t].begin(), touched[t].end());
  }
  const absl::Status lookup = reader->Lookup(rows);
  ASSERT_TRUE(lookup.ok()) << lookup;

  const auto without = Replay(acked);
  std::vector<Push> with_in_flight = acked;
  with_in_flight.push_back(*in_flight);
  const auto with = Replay(with_in_flight);
  std::string first_without, first_with;
  const int bad_without = Mismatches(*without, rows, &first_without);
  const int bad_with = Mismatches(*with, rows, &first_with);
  size_t total = 0;
  for (const auto& r : rows) total += r.ids.size();
  // Row by row: all acknowledged pushes are there, and the unacknowledged one
  // is there entirely or not at all.
  EXPECT_TRUE(bad_without == 0 || bad_with == 0)
      << bad_without << " of " << total << " rows differ from the " << acked.size()
      << " acknowledged pushes (" << first_without << "), " << bad_with
      << " from those plus the one in flight (" << first_with << ")";
  std::cerr << "durability: " << acked.size() << " acknowledged pushes, " << total
            << " rows checked; in-flight push " << (bad_without == 0 ? "not applied" : "applied")
            << "\n";

  // The restarted server keeps working.
  Push more(kTables);
  more[0].ids = {1, 2, 3};
  more[0].values.assign(3 * kDim, 0.25f);
  EXPECT_TRUE(reader->Push(more).ok());
}

INSTANTIATE_TEST_SUITE_P(WalOnly, PsDurabilityTest, ::testing::Values(false));
INSTANTIATE_TEST_SUITE_P(SyncWrites, PsDurabilityTest, ::testing::Values(true));

}  // namespace
}  // namespace shadowsync
