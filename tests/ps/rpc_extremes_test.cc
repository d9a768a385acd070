// Every integer field of every parameter-server RPC at its extremes (issue
// 30): a real server on loopback, a valid request per RPC, and for each
// integer field reachable from it (nested and repeated ones too) the request
// again with that one field at 0, the type's minimum and its maximum. Each
// must be served or refused with a clear error (never INTERNAL, UNKNOWN,
// DATA_LOSS or a timeout), the server must go on answering, and the rows
// stored before must still read back the same.
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps/ps_server.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "tests/util/embedding_tables.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr int kDim = 4;
constexpr uint32_t kSlots = 64;

// One integer field, reached from the request by `path` (each step a field
// and, for a repeated one, element 0).
struct IntField {
  std::vector<const FieldDescriptor*> path;
  std::string name;  // "tables[0].ids[0]"
};

void CollectIntFields(const google::protobuf::Descriptor* type,
                      std::vector<const FieldDescriptor*> prefix, const std::string& name,
                      int depth, std::vector<IntField>& out) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    std::vector<const FieldDescriptor*> path = prefix;
    path.push_back(f);
    const std::string here =
        absl::StrCat(name.empty() ? "" : name + ".", f->name(), f->is_repeated() ? "[0]" : "");
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth < 3) CollectIntFields(f->message_type(), path, here, depth + 1, out);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
               f->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
               f->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
               f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
      out.push_back({std::move(path), here});
    }
  }
}

// The message holding the last field of `path` inside `m`, creating element
// 0 of repeated messages and the messages on the way.
Message* Parent(Message* m, const std::vector<const FieldDescriptor*>& path) {
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const Reflection* r = m->GetReflection();
    const FieldDescriptor* f = path[i];
    if (f->is_repeated()) {
      m = r->FieldSize(*m, f) > 0 ? r->MutableRepeatedMessage(m, f, 0) : r->AddMessage(m, f);
    } else {
      m = r->MutableMessage(m, f);
    }
  }
  return m;
}

enum class Extreme { kZero, kMin, kMax };

void SetInt(Message* m, const FieldDescriptor* f, Extreme e) {
  const Reflection* r = m->GetReflection();
  auto pick = [e](auto lowest, auto highest) {
    return e == Extreme::kZero ? decltype(lowest){0} : e == Extreme::kMin ? lowest : highest;
  };
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t v =
          pick(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      if (!f->is_repeated()) return r->SetInt32(m, f, v);
      if (r->FieldSize(*m, f) == 0) return r->AddInt32(m, f, v);
      return r->SetRepeatedInt32(m, f, 0, v);
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v =
          pick(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (!f->is_repeated()) return r->SetInt64(m, f, v);
      if (r->FieldSize(*m, f) == 0) return r->AddInt64(m, f, v);
      return r->SetRepeatedInt64(m, f, 0, v);
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const uint32_t v = pick(uint32_t{0}, std::numeric_limits<uint32_t>::max());
      if (!f->is_repeated()) return r->SetUInt32(m, f, v);
      if (r->FieldSize(*m, f) == 0) return r->AddUInt32(m, f, v);
      return r->SetRepeatedUInt32(m, f, 0, v);
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = pick(uint64_t{0}, std::numeric_limits<uint64_t>::max());
      if (!f->is_repeated()) return r->SetUInt64(m, f, v);
      if (r->FieldSize(*m, f) == 0) return r->AddUInt64(m, f, v);
      return r->SetRepeatedUInt64(m, f, 0, v);
    }
    default:
      return;
  }
}

class RpcExtremesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ps::PsServerOptions o;
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "";
    o.store.db_path = dir_.File("ps");
    o.store.dim = kDim;
    o.store.tables = testing::NumberedTables(3, 1000);
    o.store.num_slots = kSlots;
    o.store.cache_bytes = 1 << 20;
    o.eviction_interval = absl::ZeroDuration();
    o.shutdown_grace = absl::Milliseconds(200);
    auto server = ps::PsServer::Start(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::ParameterServer::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    // Some rows to keep intact.
    v1::PushGradientsRequest push;
    v1::TableRows* t = push.add_tables();
    t->set_table(1);
    for (uint64_t id = 0; id < 50; ++id) {
      t->add_ids(id);
      for (int k = 0; k < kDim; ++k) t->add_values(0.25f);
    }
    grpc::ClientContext context;
    v1::PushGradientsResponse pushed;
    ASSERT_TRUE(stub_->PushGradients(&context, push, &pushed).ok());
  }

  // Stats' checksum of every stored row; fails the test if the server does
  // not answer.
  uint64_t ValueChecksum() {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(absl::Seconds(10)));
    v1::StatsResponse stats;
    const grpc::Status s = stub_->Stats(&context, {}, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats.value_checksum();
  }

  // The rows SetUp pushed, as Lookup reads them.
  std::vector<float> KeptRows() {
    v1::LookupRequest lookup;
    v1::TableRows* t = lookup.add_tables();
    t->set_table(1);
    for (uint64_t id = 0; id < 50; ++id) t->add_ids(id);
    grpc::ClientContext context;
    v1::LookupResponse rows;
    const grpc::Status s = stub_->Lookup(&context, lookup, &rows);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!s.ok() || rows.tables_size() != 1) return {};
    return {rows.tables(0).values().begin(), rows.tables(0).values().end()};
  }

  testing::ScratchDir dir_;
  std::unique_ptr<ps::PsServer> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

// One unary RPC: a valid request, and how to send a request of its type.
struct Rpc {
  std::string name;
  std::unique_ptr<Message> valid;
  // Whether an accepted request may add or change rows.
  bool writes_rows;
  std::function<grpc::Status(grpc::ClientContext*, const Message&)> call;
};

TEST_F(RpcExtremesTest, EveryIntegerFieldOfEveryUnaryRpcAtItsExtremesIsServedOrRefusedClearly) {
  const ShardMap map = ShardMap::Balanced(kSlots, {server_->address()}, 1);
  std::vector<Rpc> rpcs;
  {
    v1::LookupRequest r;
    v1::TableRows* t = r.add_tables();
    t->set_table(0);
    t->add_ids(7);
    rpcs.push_back({"Lookup", std::make_unique<v1::LookupRequest>(r), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::LookupResponse response;
                      return stub_->Lookup(c, static_cast<const v1::LookupRequest&>(m), &response);
                    }});
  }
  {
    v1::PushGradientsRequest r;
    v1::TableRows* t = r.add_tables();
    t->set_table(0);
    t->add_ids(7);
    for (int k = 0; k < kDim; ++k) t->add_values(0.5f);
    rpcs.push_back({"PushGradients", std::make_unique<v1::PushGradientsRequest>(r), true,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::PushGradientsResponse response;
                      return stub_->PushGradients(
                          c, static_cast<const v1::PushGradientsRequest&>(m), &response);
                    }});
  }
  {
    v1::SetShardMapRequest r;
    *r.mutable_map() = map.ToProto();
    r.set_self_index(0);
    rpcs.push_back({"SetShardMap", std::make_unique<v1::SetShardMapRequest>(r), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::SetShardMapResponse response;
                      return stub_->SetShardMap(c, static_cast<const v1::SetShardMapRequest&>(m),
                                                &response);
                    }});
  }
  {
    v1::DropSlotsRequest r;
    r.add_slots(kSlots - 1);
    rpcs.push_back({"DropSlots", std::make_unique<v1::DropSlotsRequest>(r), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::DropSlotsResponse response;
                      return stub_->DropSlots(c, static_cast<const v1::DropSlotsRequest&>(m),
                                              &response);
                    }});
  }
  {
    v1::CheckpointRequest r;
    r.set_path("extremes");
    rpcs.push_back({"Checkpoint", std::make_unique<v1::CheckpointRequest>(r), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::CheckpointResponse response;
                      return stub_->Checkpoint(c, static_cast<const v1::CheckpointRequest&>(m),
                                               &response);
                    }});
  }
  {
    rpcs.push_back({"GetShardMap", std::make_unique<v1::GetShardMapRequest>(), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::ShardMap response;
                      return stub_->GetShardMap(c, static_cast<const v1::GetShardMapRequest&>(m),
                                                &response);
                    }});
    rpcs.push_back({"Stats", std::make_unique<v1::StatsRequest>(), false,
                    [this](grpc::ClientContext* c, const Message& m) {
                      v1::StatsResponse response;
                      return stub_->Stats(c, static_cast<const v1::StatsRequest&>(m), &response);
                    }});
  }

  const std::vector<float> kept = KeptRows();
  int cases = 0;
  for (const Rpc& rpc : rpcs) {
    std::vector<IntField> fields;
    CollectIntFields(rpc.valid->GetDescriptor(), {}, "", 0, fields);
    for (const IntField& field : fields) {
      for (const Extreme e : {Extreme::kZero, Extreme::kMin, Extreme::kMax}) {
        std::unique_ptr<Message> request(rpc.valid->New());
        request->CopyFrom(*rpc.valid);
        SetInt(Parent(request.get(), field.path), field.path.back(), e);
        const uint64_t rows_before = ValueChecksum();
        grpc::ClientContext context;
        context.set_deadline(DeadlineFromNow(absl::Seconds(20)));
        const grpc::Status s = rpc.call(&context, *request);
        const std::string what = absl::StrCat(rpc.name, " ", field.name, " = ",
                                              e == Extreme::kZero  ? "0"
                                              : e == Extreme::kMin ? "min"
                                                                   : "max",
                                              ": ", s.error_code(), " ", s.error_message());
        EXPECT_THAT(s.error_code(),
                    ::testing::AnyOf(
                        grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT,
                        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::OUT_OF_RANGE,
                        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::ALREADY_EXISTS))
            << what;
        EXPECT_TRUE(s.ok() || !s.error_message().empty()) << what;
        ++cases;
        if (!rpc.writes_rows) {
          EXPECT_EQ(ValueChecksum(), rows_before) << what;
        }
      }
    }
  }
  EXPECT_GE(cases, 33);  // 11 integer fields of 7 RPCs, 3 values each.
  // Pushes and lookups at the extremes may add rows (any 64-bit id is an
  // id); the rows stored before read back the same.
  EXPECT_EQ(KeptRows(), kept);
  // No map at the extremes was taken: an epoch of 2^64 - 1 would leave later
  // maps no epoch to go to.
  grpc::ClientContext context;
  v1::ShardMap now;
  ASSERT_TRUE(stub_->GetShardMap(&context, {}, &now).ok());
  EXPECT_EQ(now.epoch(), 1u);
}

}  // namespace
}  // namespace shadowsync
