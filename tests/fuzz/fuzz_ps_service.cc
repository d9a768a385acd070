// Fuzzes the parameter server's request handlers (ps/ps_service.h): the
// first byte picks an RPC, the rest is that RPC's request message (for
// ImportSlots: length-prefixed SlotChunk messages), sent to a real PsServer
// (RocksDB in a temp dir) over loopback gRPC. Invariants: no crash or
// sanitizer report, and the server keeps serving: Stats succeeds after every
// input. (Row contents are not an invariant: a fuzzed SetShardMap may
// legitimately hand slots away and a DropSlots then delete them.)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "ps/ps_server.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace {

namespace v1 = shadowsync::v1;

constexpr int kDim = 4;

struct Fixture {
  std::string dir;
  std::unique_ptr<shadowsync::ps::PsServer> server;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
};

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  return context;
}

Fixture* Start() {
  auto* f = new Fixture;  // Lives for the process: libFuzzer exits without teardown.
  // Fuzzed strings are often not UTF-8; protobuf logs every such refusal.
  google::protobuf::SetLogHandler(nullptr);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fuzz_ps_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  f->dir = dir;
  shadowsync::ps::PsServerOptions o;
  o.metrics_address = "";
  o.store.db_path = dir;
  o.store.dim = kDim;
  for (int t = 0; t < 3; ++t)
    o.store.tables.push_back({.name = "t" + std::to_string(t), .hash_buckets = 1000});
  o.store.num_slots = 64;
  o.store.cache_bytes = 1 << 20;
  o.eviction_interval = absl::ZeroDuration();
  o.shutdown_grace = absl::Milliseconds(100);
  auto server = shadowsync::ps::PsServer::Start(std::move(o));
  if (!server.ok()) {
    std::fprintf(stderr, "fuzz_ps_service: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  f->server = *std::move(server);
  f->stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(f->server->address(), grpc::InsecureChannelCredentials()));
  return f;
}

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* message) {
  return message->ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = Start();
  if (size == 0) return 0;
  const uint8_t rpc = data[0] % 9;
  ++data;
  --size;
  switch (rpc) {
    case 0: {
      v1::LookupRequest request;
      v1::LookupResponse response;
      if (Parse(data, size, &request)) (void)f->stub->Lookup(Context().get(), request, &response);
      break;
    }
    case 1: {
      v1::PushGradientsRequest request;
      v1::PushGradientsResponse response;
      if (Parse(data, size, &request))
        (void)f->stub->PushGradients(Context().get(), request, &response);
      break;
    }
    case 2: {
      v1::GetShardMapRequest request;
      v1::ShardMap response;
      if (Parse(data, size, &request))
        (void)f->stub->GetShardMap(Context().get(), request, &response);
      break;
    }
    case 3: {
      v1::SetShardMapRequest request;
      v1::SetShardMapResponse response;
      if (Parse(data, size, &request))
        (void)f->stub->SetShardMap(Context().get(), request, &response);
      break;
    }
    case 4: {
      v1::ExportSlotsRequest request;
      if (!Parse(data, size, &request)) break;
      auto context = Context();
      auto reader = f->stub->ExportSlots(context.get(), request);
      v1::SlotChunk chunk;
      while (reader->Read(&chunk)) {
      }
      (void)reader->Finish();
      break;
    }
    case 5: {
      // Chunks: [len byte][len bytes of SlotChunk]...
      auto context = Context();
      v1::ImportSlotsResponse response;
      auto writer = f->stub->ImportSlots(context.get(), &response);
      size_t at = 0;
      while (at < size) {
        const size_t len = std::min<size_t>(data[at], size - at - 1);
        v1::SlotChunk chunk;
        if (Parse(data + at + 1, len, &chunk) && !writer->Write(chunk)) break;
        at += 1 + len;
      }
      writer->WritesDone();
      (void)writer->Finish();
      break;
    }
    case 6: {
      v1::DropSlotsRequest request;
      v1::DropSlotsResponse response;
      if (Parse(data, size, &request))
        (void)f->stub->DropSlots(Context().get(), request, &response);
      break;
    }
    case 7: {
      v1::CheckpointRequest request;
      v1::CheckpointResponse response;
      if (!Parse(data, size, &request)) break;
      // Any path: the server confines it to its checkpoint directory.
      (void)f->stub->Checkpoint(Context().get(), request, &response);
      std::filesystem::remove_all(f->dir + "/checkpoints");
      break;
    }
    case 8: {
      v1::StatsRequest request;
      v1::StatsResponse response;
      if (Parse(data, size, &request)) (void)f->stub->Stats(Context().get(), request, &response);
      break;
    }
  }
  // Still serving.
  v1::StatsResponse stats;
  const grpc::Status status = f->stub->Stats(Context().get(), v1::StatsRequest(), &stats);
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz_ps_service: Stats failed after rpc %d: %s\n", rpc,
                 status.error_message().c_str());
    std::abort();
  }
  return 0;
}
