// Fuzzes the syncer's request handlers (syncer/syncer_service.h): the first
// byte picks an RPC, the rest is its request message, sent to a real
// SyncerServer over loopback gRPC with a short deadline (AllReduce and Clock
// may legitimately wait for members that never come). Invariants: no crash or
// sanitizer report, and the server keeps serving: Stats succeeds after every
// input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/syncer_server.h"

namespace {

namespace v1 = shadowsync::v1;

struct Fixture {
  std::unique_ptr<shadowsync::syncer::SyncerServer> server;
  std::unique_ptr<v1::Syncer::Stub> stub;
};

std::unique_ptr<grpc::ClientContext> Context(int ms) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
  return context;
}

Fixture* Start() {
  auto* f = new Fixture;  // Lives for the process: libFuzzer exits without teardown.
  // Fuzzed strings are often not UTF-8; protobuf logs every such refusal.
  google::protobuf::SetLogHandler(nullptr);
  shadowsync::syncer::SyncerServerOptions o;
  o.metrics_address = "";
  o.shutdown_grace = absl::Milliseconds(100);
  auto server = shadowsync::syncer::SyncerServer::Start(std::move(o));
  if (!server.ok()) {
    std::fprintf(stderr, "fuzz_syncer_service: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  f->server = *std::move(server);
  f->stub = v1::Syncer::NewStub(
      grpc::CreateChannel(f->server->address(), grpc::InsecureChannelCredentials()));
  return f;
}

template <typename Request, typename Response, typename Call>
void Send(const uint8_t* data, size_t size, Call call) {
  Request request;
  Response response;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  (void)call(Context(50).get(), request, &response);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = Start();
  if (size == 0) return 0;
  const uint8_t rpc = data[0] % 8;
  ++data;
  --size;
  v1::Syncer::Stub* s = f->stub.get();
  switch (rpc) {
    case 0:
      Send<v1::InitCentreRequest, v1::CentreResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->InitCentre(c, q, r); });
      break;
    case 1:
      Send<v1::PullCentreRequest, v1::CentreResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->PullCentre(c, q, r); });
      break;
    case 2:
      Send<v1::AddToCentreRequest, v1::CentreResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->AddToCentre(c, q, r); });
      break;
    case 3:
      Send<v1::AllReduceRequest, v1::AllReduceResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->AllReduce(c, q, r); });
      break;
    case 4:
      Send<v1::JoinRequest, v1::JoinResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->Join(c, q, r); });
      break;
    case 5:
      Send<v1::LeaveRequest, v1::LeaveResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->Leave(c, q, r); });
      break;
    case 6:
      Send<v1::ClockRequest, v1::ClockResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->Clock(c, q, r); });
      break;
    case 7:
      Send<v1::SyncerStatsRequest, v1::SyncerStatsResponse>(
          data, size, [s](auto* c, auto& q, auto* r) { return s->Stats(c, q, r); });
      break;
  }
  v1::SyncerStatsResponse stats;
  const grpc::Status status = f->stub->Stats(Context(2000).get(), v1::SyncerStatsRequest(), &stats);
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz_syncer_service: Stats failed after rpc %d: %s\n", rpc,
                 status.error_message().c_str());
    std::abort();
  }
  return 0;
}
