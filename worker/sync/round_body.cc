#include "worker/sync/round_body.h"

#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {

Body BodyOf(SyncAlgorithm algorithm) {
  switch (algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kFgEasgd:
      return Body::kEasgd;
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgBmuf:
      return Body::kBmuf;
    default:
      return Body::kMa;
  }
}

absl::Status RoundBody::Start(std::span<float> params) {
  const size_t n = params.size();
  scratch_.resize(n);
  if (body_ == Body::kEasgd) {
    std::vector<float> init(params.begin(), params.end());
    SS_RETURN_IF_ERROR(client_->InitCentre(init, scratch_));
    StoreRelaxed(params, scratch_);
    return absl::OkStatus();
  }
  if (body_ == Body::kBmuf) {
    global_.assign(params.begin(), params.end());
    momentum_.assign(n, 0.0f);
  }
  // Rounds from now on wait for this trainer (until it leaves or times out).
  return client_->Join(config_.group);
}

absl::Status RoundBody::Rejoin(std::span<const float> replica) {
  if (body_ == Body::kEasgd) return client_->InitCentre(replica, scratch_);
  return client_->Join(config_.group);
}

absl::Status RoundBody::Run(std::span<const float> snapshot, std::span<float> target,
                            absl::Duration* waited) {
  if (waited != nullptr) *waited = absl::ZeroDuration();
  switch (body_) {
    case Body::kEasgd:
      SS_RETURN_IF_ERROR(client_->PullCentre(scratch_));
      EasgdElastic(config_.easgd_alpha, snapshot, scratch_, scratch_);
      SS_RETURN_IF_ERROR(client_->AddToCentre(scratch_));
      for (size_t i = 0; i < snapshot.size(); ++i) target[i] = snapshot[i] - scratch_[i];
      return absl::OkStatus();
    case Body::kMa: {
      SS_ASSIGN_OR_RETURN(syncer::RoundResult r,
                          client_->AllReduceMean(config_.group, snapshot, target));
      if (waited != nullptr) *waited = r.waited;
      return absl::OkStatus();
    }
    case Body::kBmuf: {
      SS_ASSIGN_OR_RETURN(syncer::RoundResult r,
                          client_->AllReduceMean(config_.group, snapshot, scratch_));
      if (waited != nullptr) *waited = r.waited;
      BmufStep(config_.bmuf, scratch_, global_, momentum_, target);
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown round body");
}

}  // namespace shadowsync::worker
