// Private to jobspec/: how a plain (unquoted, untagged) YAML scalar
// resolves under the YAML 1.2 core schema, which job specs are read by.
// Thread-safe: pure function.
#ifndef SHADOWSYNC_JOBSPEC_YAML_SCALAR_H_
#define SHADOWSYNC_JOBSPEC_YAML_SCALAR_H_

#include <nlohmann/json.hpp>
#include <string>

namespace shadowsync::job_spec_internal {

// null for "", "~" and null/Null/NULL; true/false in three spellings (yes,
// no, on and off stay strings); integers in decimal, 0x hex and 0o octal
// (beyond 64 bits as a double, so the field reports a range error); core
// schema floats and [+-].inf, .nan; anything else is the string itself.
nlohmann::json ResolvePlainScalar(const std::string& s);

}  // namespace shadowsync::job_spec_internal

#endif  // SHADOWSYNC_JOBSPEC_YAML_SCALAR_H_
