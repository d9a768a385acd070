// Exit codes that mean more than "failed", shared by the processes that exit
// with them and the supervisors that read them: the local launcher, the pod
// entry point and, through the container's exit code, the operator.
#ifndef SHADOWSYNC_COMMON_EXIT_CODES_H_
#define SHADOWSYNC_COMMON_EXIT_CODES_H_

namespace shadowsync {

// Bad input (a flag, a job file): running it again cannot help.
inline constexpr int kExitBadInput = 2;
// A trainer stopped because its run is not learning
// (spec.trainer.learningCheck.fail): a restart would repeat it.
inline constexpr int kExitNotLearning = 3;

// A trainer pod's termination message (the container's
// terminationMessagePath) starts with this when its run was not learning;
// the rest says why. The operator turns it into the job's condition.
inline constexpr char kNotLearningMessagePrefix[] = "not learning: ";

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_EXIT_CODES_H_
