// Mutual TLS and the bearer token (common/grpc_security.h) against real
// parameter servers and syncers on loopback. Certificates are made fresh by
// tests/util/gen_test_certs.sh (openssl).
#include "common/grpc_security.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "ps/client/ps_client.h"
#include "ps/client/resharder.h"
#include "ps/ps_server.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/syncer_server.h"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;
constexpr uint32_t kSlots = 16;

class GrpcSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new shadowsync::testing::ScratchDir();
    const std::string cmd = "bash " + shadowsync::testing::SourceDir() +
                            "/tests/util/gen_test_certs.sh " + certs_->path().string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  static std::string Cert(const std::string& name) { return certs_->File(name); }

  // The job's material: CA "ca", leaf "tls", token "token" (each optional).
  static GrpcSecurity Load(bool tls, bool token, const std::string& leaf = "tls",
                           const std::string& token_file = "token",
                           const std::string& server_name = kDefaultTlsServerName) {
    GrpcSecurityFiles files;
    if (tls) {
      files.tls_ca_file = Cert("ca.crt");
      files.tls_cert_file = Cert(leaf + ".crt");
      files.tls_key_file = Cert(leaf + ".key");
      files.tls_server_name = server_name;
    }
    if (token) files.auth_token_file = Cert(token_file);
    absl::StatusOr<GrpcSecurity> s = LoadGrpcSecurity(files);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : GrpcSecurity();
  }

  // With `metrics`, the server exports /metrics on a free port.
  std::unique_ptr<ps::PsServer> StartPs(const GrpcSecurity& security, bool metrics = false) {
    ps::PsServerOptions o;
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = metrics ? "127.0.0.1:0" : "";
    o.store.db_path = dir_.File("ps" + std::to_string(++servers_));
    o.store.dim = kDim;
    o.store.tables = {{.name = "t0", .hash_buckets = 1000}, {.name = "t1", .hash_buckets = 1000}};
    o.store.num_slots = kSlots;
    o.store.cache_bytes = 1 << 20;
    o.eviction_interval = absl::ZeroDuration();
    o.shutdown_grace = absl::Milliseconds(200);
    o.security = security;
    auto server = ps::PsServer::Start(std::move(o));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  std::unique_ptr<syncer::SyncerServer> StartSyncer(const GrpcSecurity& security,
                                                    bool metrics = false) {
    syncer::SyncerServerOptions o;
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = metrics ? "127.0.0.1:0" : "";
    o.shutdown_grace = absl::Milliseconds(200);
    o.security = security;
    auto server = syncer::SyncerServer::Start(std::move(o));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::unique_ptr<v1::ParameterServer::Stub> PsStub(const std::string& address,
                                                           const GrpcSecurity& security) {
    return v1::ParameterServer::NewStub(CreateChannel(address, security));
  }
  static std::unique_ptr<v1::Syncer::Stub> SyncerStub(const std::string& address,
                                                      const GrpcSecurity& security) {
    return v1::Syncer::NewStub(CreateChannel(address, security));
  }
  // A TLS client that trusts the job CA but presents no certificate.
  static std::shared_ptr<grpc::Channel> NoCertChannel(const std::string& address) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = shadowsync::testing::ReadFile(Cert("ca.crt"));
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(kDefaultTlsServerName);
    return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return context;
  }
  static grpc::Status GetMap(v1::ParameterServer::Stub& stub) {
    v1::ShardMap map;
    return stub.GetShardMap(Context().get(), {}, &map);
  }
  static grpc::Status SyncerStats(v1::Syncer::Stub& stub) {
    v1::SyncerStatsResponse response;
    return stub.Stats(Context().get(), {}, &response);
  }

  // Calls `method` ("/package.Service/Method") with one request message of
  // default values, reading every reply: as a generic stream, since on the
  // wire unary and streaming calls differ only in how many messages they send.
  static grpc::Status CallWithDefaultRequest(const std::shared_ptr<grpc::Channel>& channel,
                                             const std::string& method) {
    grpc::GenericStub stub(channel);
    auto context = Context();
    grpc::CompletionQueue cq;
    auto next = [&cq] {
      void* tag = nullptr;
      bool ok = false;
      EXPECT_TRUE(cq.Next(&tag, &ok));
      return ok;
    };
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub.PrepareCall(context.get(), method, &cq);
    call->StartCall(nullptr);
    next();
    grpc::Slice empty(std::string{});  // Every field at its default.
    grpc::ByteBuffer request(&empty, 1);
    call->Write(request, nullptr);
    next();
    call->WritesDone(nullptr);
    next();
    grpc::ByteBuffer reply;
    do {
      call->Read(&reply, nullptr);
    } while (next());
    grpc::Status status;
    call->Finish(&status, nullptr);
    next();
    return status;
  }

  // The calls of `method` the server has answered (its latency histogram's
  // count): `metric` labelled `label`="method" on the /metrics endpoint.
  static int64_t Served(int metrics_port, const std::string& metric, const std::string& label,
                        const std::string& method) {
    std::string body;
    EXPECT_EQ(shadowsync::testing::HttpGet(metrics_port, "/metrics", &body), 200);
    const std::string prefix = metric + "_count{" + label + "=\"" + method + "\"}";
    std::istringstream lines(body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(line.rfind(' ') + 1));
    }
    ADD_FAILURE() << "no " << prefix << " in /metrics";
    return -1;
  }

  // Every RPC method of `service`, called with no token and with a wrong one,
  // is refused UNAUTHENTICATED without reaching its handler (which would count
  // it in `metric`); called with `job`'s token it reaches the handler.
  static void ExpectEveryMethodNeedsTheToken(const std::string& service_name,
                                             const std::string& address, int metrics_port,
                                             const std::string& metric, const std::string& label,
                                             const GrpcSecurity& job) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
    ASSERT_NE(service, nullptr) << service_name;
    ASSERT_GT(service->method_count(), 0);
    GrpcSecurity no_token = job;
    no_token.auth_token.clear();
    GrpcSecurity wrong_token = job;
    wrong_token.auth_token = job.auth_token + "x";
    const auto authorised = CreateChannel(address, job);
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string name = service->method(i)->name();
      const std::string method = "/" + service->full_name() + "/" + name;
      const int64_t before = Served(metrics_port, metric, label, name);
      for (const GrpcSecurity* bad : {&no_token, &wrong_token}) {
        const grpc::Status refused = CallWithDefaultRequest(CreateChannel(address, *bad), method);
        EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
        EXPECT_EQ(refused.error_message(), kUnauthenticatedMessage) << method;
      }
      EXPECT_EQ(Served(metrics_port, metric, label, name), before)
          << method << ": a refused call reached the handler";
      // Default values are not always a valid request: what matters is that
      // the handler answered.
      const grpc::Status served = CallWithDefaultRequest(authorised, method);
      EXPECT_NE(served.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << ": " << served.error_message();
      EXPECT_EQ(Served(metrics_port, metric, label, name), before + 1) << method;
    }
  }

  static inline shadowsync::testing::ScratchDir* certs_ = nullptr;
  shadowsync::testing::ScratchDir dir_;
  int servers_ = 0;
};

// --- Loading -------------------------------------------------------------------

TEST_F(GrpcSecurityTest, LoadNamesTheFlagAndPathOfABadFile) {
  GrpcSecurityFiles files;
  files.tls_ca_file = Cert("ca.crt");
  files.tls_cert_file = dir_.File("missing.crt");
  files.tls_key_file = Cert("tls.key");
  EXPECT_THAT(LoadGrpcSecurity(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--tls-cert-file: cannot read " + dir_.File("missing.crt")));

  files.tls_cert_file = Cert("token");  // Not PEM.
  EXPECT_THAT(LoadGrpcSecurity(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--tls-cert-file: " + Cert("token") + " is not PEM"));

  files.tls_cert_file.clear();  // A partial triple.
  EXPECT_THAT(LoadGrpcSecurity(files),
              StatusIs(absl::StatusCode::kInvalidArgument, "missing: --tls-cert-file"));

  GrpcSecurityFiles token;
  token.auth_token_file = dir_.File("no-token");
  EXPECT_THAT(LoadGrpcSecurity(token),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--auth-token-file: cannot read " + dir_.File("no-token")));
  shadowsync::testing::WriteFile(dir_.File("blank"), " \n");
  token.auth_token_file = dir_.File("blank");
  EXPECT_THAT(LoadGrpcSecurity(token),
              StatusIs(absl::StatusCode::kInvalidArgument, "holds only whitespace"));
  shadowsync::testing::WriteFile(dir_.File("two"), "s3cret more\n");
  token.auth_token_file = dir_.File("two");
  absl::StatusOr<GrpcSecurity> two = LoadGrpcSecurity(token);
  EXPECT_THAT(two, StatusIs(absl::StatusCode::kInvalidArgument, "printable ASCII"));
  EXPECT_THAT(std::string(two.status().message()), ::testing::Not(HasSubstr("s3cret")));
}

TEST_F(GrpcSecurityTest, LoadTrimsTheTokenAndDescribeHidesSecrets) {
  shadowsync::testing::WriteFile(dir_.File("tok"), "  abc123\n");
  GrpcSecurityFiles files;
  files.auth_token_file = dir_.File("tok");
  absl::StatusOr<GrpcSecurity> s = LoadGrpcSecurity(files);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->auth_token, "abc123");
  EXPECT_FALSE(s->tls());
  EXPECT_EQ(s->Describe(), "tls=off token=on admin_token=off");
  GrpcSecurity both = Load(true, true);
  both.admin_token = "admin123";
  EXPECT_EQ(both.Describe(), "tls=mutual tls_server_name=shadowsync token=on admin_token=on");
  EXPECT_THAT(both.Describe(), ::testing::Not(HasSubstr(both.auth_token)));
  EXPECT_THAT(both.Describe(), ::testing::Not(HasSubstr("admin123")));
  // The admin token file is read and checked like the auth token's.
  shadowsync::testing::WriteFile(dir_.File("admin"), "\n");
  files.admin_token_file = dir_.File("admin");
  EXPECT_THAT(LoadGrpcSecurity(files),
              StatusIs(absl::StatusCode::kInvalidArgument, "--admin-token-file: "));
}

TEST_F(GrpcSecurityTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer abd"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer abc "));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST_F(GrpcSecurityTest, ArgsCarryPathsOnly) {
  GrpcSecurityFiles files;
  EXPECT_TRUE(GrpcSecurityArgs(files).empty());
  files.tls_ca_file = "/a/ca.crt";
  files.tls_cert_file = "/a/tls.crt";
  files.tls_key_file = "/a/tls.key";
  files.auth_token_file = "/b/token";
  files.admin_token_file = "/c/admin-token";
  EXPECT_THAT(GrpcSecurityArgs(files),
              ::testing::ElementsAre("--tls-ca-file", "/a/ca.crt", "--tls-cert-file", "/a/tls.crt",
                                     "--tls-key-file", "/a/tls.key", "--tls-server-name",
                                     "shadowsync", "--auth-token-file", "/b/token",
                                     "--admin-token-file", "/c/admin-token"));
}

TEST_F(GrpcSecurityTest, WriteNewTokenMakesAFreshTokenOnlyItsOwnerReads) {
  const std::string path = dir_.File("admin-token");
  ASSERT_TRUE(WriteNewToken(path).ok());
  const std::string first = shadowsync::testing::ReadFile(path);
  EXPECT_THAT(first, ::testing::MatchesRegex("[0-9a-f]{64}\n"));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_TRUE(WriteNewToken(path).ok());
  EXPECT_NE(shadowsync::testing::ReadFile(path), first);
  GrpcSecurityFiles files;
  files.admin_token_file = path;
  absl::StatusOr<GrpcSecurity> loaded = LoadGrpcSecurity(files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->admin_token + "\n", shadowsync::testing::ReadFile(path));
}

// --- Mutual TLS ----------------------------------------------------------------

TEST_F(GrpcSecurityTest, PsAcceptsOnlyClientsWithACertificateOfTheJobCa) {
  const GrpcSecurity job = Load(/*tls=*/true, /*token=*/false);
  auto server = StartPs(job);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();

  EXPECT_TRUE(GetMap(*PsStub(address, job)).ok());
  // Also through the resharder's client (the operator's path).
  absl::StatusOr<ShardMap> map = ps::FetchShardMap(address, absl::Seconds(5), job);
  EXPECT_TRUE(map.ok()) << map.status();

  // Plaintext, TLS without a client certificate, a certificate of another
  // CA: the handshake fails.
  EXPECT_EQ(GetMap(*PsStub(address, GrpcSecurity())).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GetMap(*v1::ParameterServer::NewStub(NoCertChannel(address))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const GrpcSecurity other = Load(true, false, "other");
  EXPECT_EQ(GetMap(*PsStub(address, other)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(ps::FetchShardMap(address, absl::Seconds(5), other),
              StatusIs(absl::StatusCode::kUnavailable, ""));
  // A client checking for another server name refuses the server.
  const GrpcSecurity wrong_name = Load(true, false, "tls", "token", "not-shadowsync");
  EXPECT_EQ(GetMap(*PsStub(address, wrong_name)).error_code(), grpc::StatusCode::UNAVAILABLE);

  // The server still serves the right client after the refusals.
  EXPECT_TRUE(GetMap(*PsStub(address, job)).ok());
}

TEST_F(GrpcSecurityTest, SyncerAcceptsOnlyClientsWithACertificateOfTheJobCa) {
  const GrpcSecurity job = Load(/*tls=*/true, /*token=*/false);
  auto server = StartSyncer(job);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();

  EXPECT_TRUE(SyncerStats(*SyncerStub(address, job)).ok());
  EXPECT_EQ(SyncerStats(*SyncerStub(address, GrpcSecurity())).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(SyncerStats(*v1::Syncer::NewStub(NoCertChannel(address))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(SyncerStats(*SyncerStub(address, Load(true, false, "other"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(SyncerStats(*SyncerStub(address, job)).ok());
}

// --- Bearer token --------------------------------------------------------------

TEST_F(GrpcSecurityTest, PsRefusesCallsWithoutTheTokenAndKeepsItsData) {
  // Over mutual TLS, as a secured job runs: the token is checked on top.
  const GrpcSecurity job = Load(/*tls=*/true, /*token=*/true);
  auto server = StartPs(job);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  GrpcSecurity no_token = job;
  no_token.auth_token.clear();
  const GrpcSecurity wrong_token = Load(true, true, "tls", "wrong-token");

  // Rows written by an authorised trainer.
  ps::PsClientOptions options;
  options.security = job;
  auto client = ps::PsClient::Connect(address, kDim, 2, options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<model::TableRows> grads(2);
  grads[0].ids = {1, 2, 3};
  grads[0].values.assign(3 * kDim, 0.5f);
  grads[1].ids = {7};
  grads[1].values.assign(kDim, -0.25f);
  ASSERT_TRUE((*client)->Push(grads).ok());
  std::vector<model::TableRows> before(2);
  before[0].ids = {1, 2, 3};
  before[1].ids = {7};
  ASSERT_TRUE((*client)->Lookup(before).ok());
  absl::StatusOr<ps::RowSetChecksum> sum_before =
      ps::ClusterChecksum({address}, absl::Seconds(5), job);
  ASSERT_TRUE(sum_before.ok()) << sum_before.status();
  ASSERT_GT(sum_before->rows, 0);

  for (const GrpcSecurity* bad : {&std::as_const(no_token), &wrong_token}) {
    auto stub = PsStub(address, *bad);
    auto expect_refused = [](const grpc::Status& s, const char* rpc) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc;
      EXPECT_EQ(s.error_message(), kUnauthenticatedMessage) << rpc;
    };
    expect_refused(GetMap(*stub), "GetShardMap");
    v1::PushGradientsRequest push;
    v1::TableRows* rows = push.add_tables();
    rows->set_table(0);
    rows->add_ids(1);
    for (int i = 0; i < kDim; ++i) rows->add_values(100.0f);
    v1::PushGradientsResponse pushed;
    expect_refused(stub->PushGradients(Context().get(), push, &pushed), "PushGradients");
    v1::LookupRequest lookup;
    lookup.add_tables()->add_ids(1);
    v1::LookupResponse looked;
    expect_refused(stub->Lookup(Context().get(), lookup, &looked), "Lookup");
    v1::DropSlotsRequest drop;
    for (uint32_t s = 0; s < kSlots; ++s) drop.add_slots(s);
    v1::DropSlotsResponse dropped;
    expect_refused(stub->DropSlots(Context().get(), drop, &dropped), "DropSlots");
    v1::SetShardMapRequest set;
    v1::SetShardMapResponse set_response;
    expect_refused(stub->SetShardMap(Context().get(), set, &set_response), "SetShardMap");
    v1::StatsResponse stats;
    expect_refused(stub->Stats(Context().get(), {}, &stats), "Stats");
    v1::CheckpointRequest checkpoint;
    checkpoint.set_path("ckpt");
    v1::CheckpointResponse checkpointed;
    expect_refused(stub->Checkpoint(Context().get(), checkpoint, &checkpointed), "Checkpoint");
    // The streams: refused before a row moves.
    v1::ExportSlotsRequest export_request;
    export_request.add_slots(0);
    auto context = Context();
    auto reader = stub->ExportSlots(context.get(), export_request);
    v1::SlotChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    expect_refused(reader->Finish(), "ExportSlots");
    auto import_context = Context();
    v1::ImportSlotsResponse imported;
    auto writer = stub->ImportSlots(import_context.get(), &imported);
    writer->WritesDone();
    expect_refused(writer->Finish(), "ImportSlots");
    // Through the resharder: the status names the call and server.
    EXPECT_THAT(ps::FetchShardMap(address, absl::Seconds(5), *bad),
                StatusIs(absl::StatusCode::kUnauthenticated, kUnauthenticatedMessage));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.File("ckpt")));

  // The right token still works and nothing changed.
  absl::StatusOr<ps::RowSetChecksum> sum_after =
      ps::ClusterChecksum({address}, absl::Seconds(5), job);
  ASSERT_TRUE(sum_after.ok()) << sum_after.status();
  EXPECT_EQ(*sum_after, *sum_before);
  std::vector<model::TableRows> after(2);
  after[0].ids = {1, 2, 3};
  after[1].ids = {7};
  ASSERT_TRUE((*client)->Lookup(after).ok());
  EXPECT_EQ(after[0].values, before[0].values);
  EXPECT_EQ(after[1].values, before[1].values);
  EXPECT_TRUE(GetMap(*PsStub(address, job)).ok());
}

TEST_F(GrpcSecurityTest, PsClientWithoutTheTokenGetsAClearError) {
  const GrpcSecurity job = Load(/*tls=*/false, /*token=*/true);
  auto server = StartPs(job);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(ps::PsClient::Connect(server->address(), kDim, 2),
              StatusIs(absl::StatusCode::kUnauthenticated, kUnauthenticatedMessage));
}

TEST_F(GrpcSecurityTest, SyncerRefusesCallsWithoutTheTokenAndKeepsItsCentre) {
  const GrpcSecurity job = Load(/*tls=*/false, /*token=*/true);
  auto server = StartSyncer(job);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto good = SyncerStub(address, job);

  v1::InitCentreRequest init;
  init.set_offset(0);
  init.set_total(3);
  for (float v : {1.0f, 2.0f, 3.0f}) init.add_values(v);
  v1::CentreResponse centre;
  ASSERT_TRUE(good->InitCentre(Context().get(), init, &centre).ok());

  const GrpcSecurity wrong = Load(false, true, "tls", "wrong-token");
  for (const GrpcSecurity& bad : {GrpcSecurity(), wrong}) {
    auto stub = SyncerStub(address, bad);
    auto expect_refused = [](const grpc::Status& s, const char* rpc) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc;
      EXPECT_EQ(s.error_message(), kUnauthenticatedMessage) << rpc;
    };
    v1::AddToCentreRequest add;
    add.set_offset(0);
    add.set_total(3);
    for (int i = 0; i < 3; ++i) add.add_delta(100.0f);
    v1::CentreResponse response;
    expect_refused(stub->AddToCentre(Context().get(), add, &response), "AddToCentre");
    expect_refused(stub->InitCentre(Context().get(), init, &response), "InitCentre");
    v1::PullCentreRequest pull;
    pull.set_total(3);
    pull.set_length(3);
    expect_refused(stub->PullCentre(Context().get(), pull, &response), "PullCentre");
    v1::AllReduceRequest reduce;
    reduce.set_member("intruder");
    reduce.set_total(3);
    for (int i = 0; i < 3; ++i) reduce.add_values(1.0f);
    v1::AllReduceResponse reduced;
    expect_refused(stub->AllReduce(Context().get(), reduce, &reduced), "AllReduce");
    v1::JoinRequest join;
    join.set_member("intruder");
    v1::JoinResponse joined;
    expect_refused(stub->Join(Context().get(), join, &joined), "Join");
    v1::LeaveRequest leave;
    leave.set_member("trainer-0");
    v1::LeaveResponse left;
    expect_refused(stub->Leave(Context().get(), leave, &left), "Leave");
    // The callback-API Clock RPC.
    v1::ClockRequest clock;
    clock.set_member("intruder");
    clock.set_clock(5);
    v1::ClockResponse clocked;
    expect_refused(stub->Clock(Context().get(), clock, &clocked), "Clock");
    expect_refused(SyncerStats(*stub), "Stats");
  }

  v1::PullCentreRequest pull;
  pull.set_total(3);
  pull.set_length(3);
  v1::CentreResponse pulled;
  ASSERT_TRUE(good->PullCentre(Context().get(), pull, &pulled).ok());
  EXPECT_THAT(pulled.values(), ::testing::ElementsAre(1.0f, 2.0f, 3.0f));
  EXPECT_EQ(pulled.version(), centre.version());
  v1::SyncerStatsResponse stats;
  ASSERT_TRUE(good->Stats(Context().get(), {}, &stats).ok());
  EXPECT_TRUE(stats.clocks().empty());  // The refused Clock left no member.
  EXPECT_TRUE(stats.groups().empty());  // Nor did the refused AllReduce and Join.
}

TEST_F(GrpcSecurityTest, EveryRpcOfBothServersNeedsTheTokenOverPlaintextAndTls) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "tls" : "plaintext");
    const GrpcSecurity job = Load(tls, /*token=*/true);
    auto ps = StartPs(job, /*metrics=*/true);
    auto syncer = StartSyncer(job, /*metrics=*/true);
    ASSERT_NE(ps, nullptr);
    ASSERT_NE(syncer, nullptr);
    ExpectEveryMethodNeedsTheToken(v1::ParameterServer::service_full_name(), ps->address(),
                                   ps->metrics_port(), "shadowsync_ps_request_duration_seconds",
                                   "rpc", job);
    ExpectEveryMethodNeedsTheToken(v1::Syncer::service_full_name(), syncer->address(),
                                   syncer->metrics_port(), "shadowsync_syncer_request_seconds",
                                   "method", job);
  }
}

// The admin RPCs, which change or copy out what a server stores, need the
// admin token (the operator's or the launcher's); the job's token, which
// every trainer holds, gets PERMISSION_DENIED for them and nothing changes.
// The admin token passes the token check of every RPC.
TEST_F(GrpcSecurityTest, PsTakesAdminRpcsOnlyWithTheAdminToken) {
  const std::set<std::string> admin_rpcs = {"SetShardMap", "ImportSlots", "DropSlots",
                                            "Checkpoint"};
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::ParameterServer::service_full_name());
  ASSERT_NE(service, nullptr);
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "tls" : "plaintext");
    GrpcSecurity server_security = Load(tls, /*token=*/true);
    server_security.admin_token = shadowsync::testing::ReadFile(Cert("admin-token"));
    server_security.admin_token.pop_back();  // The newline.
    auto server = StartPs(server_security);
    ASSERT_NE(server, nullptr);
    const std::string address = server->address();
    GrpcSecurity trainer = server_security;
    trainer.admin_token.clear();
    GrpcSecurity admin = server_security;
    admin.auth_token.clear();

    for (int i = 0; i < service->method_count(); ++i) {
      const std::string name = service->method(i)->name();
      const std::string method = "/" + service->full_name() + "/" + name;
      const grpc::Status as_trainer =
          CallWithDefaultRequest(CreateChannel(address, trainer), method);
      const grpc::Status as_admin = CallWithDefaultRequest(CreateChannel(address, admin), method);
      if (admin_rpcs.contains(name)) {
        EXPECT_EQ(as_trainer.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
        EXPECT_THAT(as_trainer.error_message(),
                    HasSubstr(name + " is an admin RPC: the call must carry the admin token"));
      } else {
        EXPECT_NE(as_trainer.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
        EXPECT_NE(as_trainer.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
      }
      // Default values are not always a valid request: what matters is that
      // the handler took it.
      EXPECT_NE(as_admin.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << method << ": " << as_admin.error_message();
      EXPECT_NE(as_admin.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
    }

    // A trainer that tries to move every slot away, or to write a
    // checkpoint, changes nothing; the admin's same call takes effect.
    absl::StatusOr<ShardMap> map = ps::FetchShardMap(address, absl::Seconds(5), trainer);
    ASSERT_TRUE(map.ok()) << map.status();
    const ShardMap moved =
        ShardMap::Balanced(map->num_slots(), {"127.0.0.1:1", address}, map->epoch() + 1);
    v1::SetShardMapRequest set;
    *set.mutable_map() = moved.ToProto();
    set.set_self_index(1);
    v1::SetShardMapResponse set_response;
    EXPECT_EQ(
        PsStub(address, trainer)->SetShardMap(Context().get(), set, &set_response).error_code(),
        grpc::StatusCode::PERMISSION_DENIED);
    v1::CheckpointRequest checkpoint;
    checkpoint.set_path("by-a-trainer");
    v1::CheckpointResponse checkpointed;
    EXPECT_EQ(PsStub(address, trainer)
                  ->Checkpoint(Context().get(), checkpoint, &checkpointed)
                  .error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_FALSE(std::filesystem::exists(
        dir_.File("ps" + std::to_string(servers_) + "/checkpoints/by-a-trainer")));
    absl::StatusOr<ShardMap> unchanged = ps::FetchShardMap(address, absl::Seconds(5), trainer);
    ASSERT_TRUE(unchanged.ok()) << unchanged.status();
    EXPECT_EQ(unchanged->epoch(), map->epoch());
    EXPECT_TRUE(PsStub(address, admin)->SetShardMap(Context().get(), set, &set_response).ok());
    absl::StatusOr<ShardMap> changed = ps::FetchShardMap(address, absl::Seconds(5), trainer);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(changed->epoch(), map->epoch() + 1);
  }

  // A server with an admin token but no auth token: data calls need no
  // token, admin calls still the admin token.
  GrpcSecurity admin_only;
  admin_only.admin_token = "only-the-admin";
  auto server = StartPs(admin_only);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(GetMap(*PsStub(server->address(), GrpcSecurity())).ok());
  v1::DropSlotsRequest drop;
  drop.add_slots(0);
  v1::DropSlotsResponse dropped;
  const grpc::Status anonymous =
      PsStub(server->address(), GrpcSecurity())->DropSlots(Context().get(), drop, &dropped);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << anonymous.error_message();
  // Reached the handler: it refuses to drop a slot the server owns.
  const grpc::Status by_admin =
      PsStub(server->address(), admin_only)->DropSlots(Context().get(), drop, &dropped);
  EXPECT_EQ(by_admin.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << by_admin.error_message();

  // A server with only the auth token (one started before its job had an
  // admin token) takes a client that sends both tokens.
  const GrpcSecurity auth_only = Load(/*tls=*/false, /*token=*/true);
  auto old_server = StartPs(auth_only);
  ASSERT_NE(old_server, nullptr);
  GrpcSecurity both = auth_only;
  both.admin_token = "only-the-admin";
  EXPECT_TRUE(GetMap(*PsStub(old_server->address(), both)).ok());
}

}  // namespace
}  // namespace shadowsync
