#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety, as errors) over the
# product's sources: each compile command of a clang build's
# compile_commands.json, re-run with -fsyntax-only, for the files outside
# tests/ and bench/ (their fixtures poke at guarded state on purpose, and
# their code never ships). The annotations (ABSL_GUARDED_BY and friends,
# common/mutex.h) are only checked by clang; this is what makes them more than
# comments. Needs the build's generated protobuf headers (any build of it).
#
# By default only the sources that take a lock or declare annotations, in
# themselves or in a project header they include, are parsed (45 of 104,
# half the time: CI runs this); the analysis has nothing to check in the
# others. --all parses every one (the full scan took 3.7 min on 2 cores).
#
#   scripts/thread-safety.sh [--all] [BUILD_DIR]     default: build/asan (clang-14)
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [[ "${1:-}" == "--all" ]]; then
  all=1
  shift
fi
build="${1:-build/asan}"
db="$build/compile_commands.json"
[[ -f "$db" ]] || { echo "thread-safety: no $db (configure a clang preset first)" >&2; exit 2; }
root="$(pwd)"

# One NUL-terminated shell command per product source.
node - "$db" "$root" "$all" <<'JS' > "$build/thread-safety.commands"
const fs = require('fs');
const path = require('path');
const [db, root, all] = process.argv.slice(2);
const entries = JSON.parse(fs.readFileSync(db, 'utf8'));
const locking = /ABSL_(PT_)?GUARDED_BY|ABSL_(EXCLUSIVE|SHARED)_LOCKS_REQUIRED|ABSL_LOCKS_EXCLUDED|ABSL_(EXCLUSIVE_|SHARED_)?(ACQUIRE|RELEASE)|MutexLock\b/;
// The file, or a project header it includes, locks or is annotated.
const locks = (rel) => {
  const text = fs.readFileSync(path.join(root, rel), 'utf8');
  if (locking.test(text)) return true;
  for (const m of text.matchAll(/^#include "([^"]+\.h)"/gm)) {
    const header = path.join(root, m[1]);
    if (fs.existsSync(header) && locking.test(fs.readFileSync(header, 'utf8'))) return true;
  }
  return false;
};
for (const e of entries) {
  const rel = e.file.startsWith(root + '/') ? e.file.slice(root.length + 1) : '';
  if (!rel || /^(tests|bench|build)\//.test(rel) || !rel.endsWith('.cc')) continue;
  if (all !== '1' && !locks(rel)) continue;
  if (!/clang\+\+/.test(e.command)) throw new Error(`${db}: not a clang build (${e.command.split(' ')[0]})`);
  const cmd = e.command
    .replace(/ -o \S+/, '')
    .replace(/ -fsanitize\S*/g, '')
    .replace(/ -c /, ' -fsyntax-only -Wthread-safety -Werror=thread-safety ');
  process.stdout.write(`cd ${e.directory} && ${cmd}\0`);
}
JS
count=$(tr -cd '\0' < "$build/thread-safety.commands" | wc -c)
echo "thread-safety: $count product sources"
xargs -0 -n1 -P "$(nproc)" bash -c < "$build/thread-safety.commands"
echo "thread-safety: no warnings"
