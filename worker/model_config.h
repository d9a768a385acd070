// The model a job's spec.model describes, as the trainer, the exporter and
// `shadowsync train` build it: one translation, so they cannot disagree.
#ifndef SHADOWSYNC_WORKER_MODEL_CONFIG_H_
#define SHADOWSYNC_WORKER_MODEL_CONFIG_H_

#include "jobspec/job_spec.h"
#include "model/dlrm.h"

namespace shadowsync::worker {

model::DlrmConfig DlrmConfigFor(const ModelSpec& spec);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_MODEL_CONFIG_H_
