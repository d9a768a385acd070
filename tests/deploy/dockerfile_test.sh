#!/usr/bin/env bash
# Checks the Dockerfile without a Docker engine (issue 8, docs/container.md):
#   1. the runtime stage's apt-get install list (between "# BEGIN runtime-packages"
#      and "# END runtime-packages") is parsed;
#   2. every library that `ldd` resolves for every binary the image ships comes
#      from a package on that list or from one debian:12-slim already has
#      (BASE_PACKAGES below, itself verified), and nothing is "not found";
#      a listed package that no shipped binary loads a library from is an error too;
#   3. the list holds no build tools or headers, and each name is a Debian 12 package;
#   4. the structure: a Debian 12 build stage running scripts/install-deps.sh and
#      scripts/build.sh, a slim final stage, a numeric non-root USER (the uid of
#      deploy/operator.yaml), the ENTRYPOINT, the data VOLUME, the version label;
#   5. dockerfilelint (scripts/install-node-tools.sh) reports nothing. A missing
#      linter is a failure, not a skip: CI installs it.
# Every failure is reported, then the script exits 1.
#
#   tests/deploy/dockerfile_test.sh BIN_DIR SOURCE_DIR [DOCKERFILE]
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 BIN_DIR SOURCE_DIR [DOCKERFILE]" >&2
  exit 2
fi
bin_dir=$1
src_dir=$2
dockerfile=${3:-$src_dir/Dockerfile}
linter=$src_dir/.tools/node/node_modules/.bin/dockerfilelint

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# Fatal: nothing after this can be checked meaningfully.
die() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ -f $dockerfile ]] || die "$dockerfile not found"
# The package names and ownership below are Debian 12's: elsewhere they mean nothing.
# shellcheck disable=SC1091
os_id=$(. /etc/os-release && echo "${ID}:${VERSION_ID:-}")
[[ $os_id == "debian:12" ]] || die "this check needs a Debian 12 host (dpkg, apt-cache); found ${os_id}"

# Packages debian:12-slim already contains. That image is debuerreotype's
# `minbase` Debian 12 (the Essential and Priority: required packages plus apt;
# -slim only deletes docs, man pages and locales). A package in the hard
# dependency closure (Depends/Pre-Depends, first alternative) of apt and of the
# Essential dpkg is therefore in it. Checked by hand with
#   apt-cache depends --recurse --no-recommends ... apt
#   apt-cache show dpkg | grep Essential
# and once in a `debootstrap --variant=minbase bookworm` tree (the first seven present,
# none of the runtime list); verified again below on every run:
#   libc6       Pre-Depends of dpkg     libgcc-s1   Depends of libc6 and apt
#   libstdc++6  Depends of apt          zlib1g      Pre-Depends of dpkg
#   libbz2-1.0  Pre-Depends of dpkg     libzstd1    Pre-Depends of dpkg
#   liblz4-1    Depends of libapt-pkg6.0 (apt's library)
#   liblzma5    Pre-Depends of dpkg (added later, by apt-cache only; glog needs it
#               through libunwind8)
BASE_PACKAGES=(libc6 libgcc-s1 libstdc++6 zlib1g libbz2-1.0 libzstd1 liblz4-1 liblzma5)
BASE_ROOTS=(apt dpkg)
# Runtime packages that are not shared libraries (none yet): each needs a reason here.
NON_LIBRARY_PACKAGES=()

# --- the Dockerfile as instructions: "LINE<TAB>STAGE<TAB>KEYWORD<TAB>ARGS", one per
# instruction, continuation lines joined and comment lines dropped (as Docker does).
instructions() {
  awk '
    function flush() {
      if (cur != "") {
        kw = toupper(cur); sub(/[ \t].*/, "", kw)
        args = cur; sub(/^[^ \t]+[ \t]*/, "", args)
        if (kw == "FROM") stage++
        printf "%d\t%d\t%s\t%s\n", start, stage, kw, args
      }
      cur = ""
    }
    BEGIN { stage = -1; cur = "" }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { next }  # blank lines, also inside a continuation
    {
      line = $0
      if (cur == "") start = NR
      cont = sub(/\\[ \t]*$/, "", line)
      cur = (cur == "") ? line : cur " " line
      if (!cont) flush()
    }
    END { flush() }
  ' "$dockerfile"
}
mapfile -t instr < <(instructions)

from_lines=()
for i in "${instr[@]}"; do
  IFS=$'\t' read -r _ _ kw args <<<"$i"
  [[ $kw == FROM ]] && from_lines+=("$args")
done
nstages=${#from_lines[@]}
final=$((nstages - 1))
# The first word of a FROM that is not a --flag: the image.
from_image() {
  local w
  for w in $1; do
    [[ $w == --* ]] || { echo "$w"; return; }
  done
}
stage_instr() {  # stage keyword -> args lines
  local i st kw args
  for i in "${instr[@]}"; do
    IFS=$'\t' read -r _ st kw args <<<"$i"
    [[ $st == "$1" && $kw == "$2" ]] && printf '%s\n' "$args"
  done
  return 0
}

# --- 4. structure
[[ $nstages -ge 2 ]] || fail "$dockerfile: $nstages FROM stage(s); want a build stage and a runtime stage"
if [[ $nstages -ge 1 ]]; then
  build_image=$(from_image "${from_lines[0]}")
  final_image=$(from_image "${from_lines[$final]}")
  [[ $build_image =~ ^(docker\.io/library/)?debian:(12|bookworm)([.:@-]|$) ]] ||
    fail "$dockerfile: build stage FROM $build_image; want Debian 12 (debian:12...), the distribution scripts/install-deps.sh targets"
  [[ $final_image =~ ^(docker\.io/library/)?debian:(12|bookworm)[^@]*-slim([@]|$) ]] ||
    fail "$dockerfile: final stage FROM $final_image; want a Debian 12 slim image (debian:12...-slim)"
  build_stage_name=$(awk '{ for (i = 1; i < NF; i++) if (toupper($i) == "AS") print $(i + 1) }' <<<"${from_lines[0]}")

  grep -q 'scripts/install-deps\.sh' <<<"$(stage_instr 0 RUN)" ||
    fail "$dockerfile: the build stage does not RUN scripts/install-deps.sh (the one list of system packages)"
  grep -q 'scripts/build\.sh' <<<"$(stage_instr 0 RUN)" ||
    fail "$dockerfile: the build stage does not RUN scripts/build.sh"
  [[ $final -eq 0 ]] || ! grep -q 'install-deps\.sh' <<<"$(stage_instr "$final" RUN)" ||
    fail "$dockerfile: the final stage runs scripts/install-deps.sh, which installs compilers and headers"

  user=$(stage_instr "$final" USER | tail -n 1)
  if [[ -z $user ]]; then
    fail "$dockerfile: the final stage has no USER: the image would run as root"
  elif ! [[ $user =~ ^([0-9]+)(:([0-9]+))?$ ]]; then
    fail "$dockerfile: USER $user is not numeric uid[:gid] (Kubernetes runAsNonRoot can only verify a numeric user)"
  elif [[ ${BASH_REMATCH[1]} -eq 0 || ${BASH_REMATCH[3]:-1} -eq 0 ]]; then
    fail "$dockerfile: USER $user is root"
  else
    want_uid=$(awk '/runAsUser:/ { print $2; exit }' "$src_dir/deploy/operator.yaml")
    [[ ${BASH_REMATCH[1]} == "$want_uid" ]] ||
      fail "$dockerfile: USER $user, but deploy/operator.yaml runs as runAsUser $want_uid"
  fi

  entrypoint=$(stage_instr "$final" ENTRYPOINT | tail -n 1)
  entry_bin=""
  if [[ -z $entrypoint ]]; then
    fail "$dockerfile: the final stage has no ENTRYPOINT"
  elif [[ $entrypoint =~ ^\[[[:space:]]*\"([^\"]+)\" ]]; then
    entry_bin=${BASH_REMATCH[1]}
  else
    fail "$dockerfile: ENTRYPOINT $entrypoint is not exec form [\"/path\", ...] (shell form drops signals)"
  fi

  data_dir=$(sed -n 's/.*std::string data_dir = "\([^"]*\)".*/\1/p' "$src_dir/operator/reconcile.h")
  [[ -n $data_dir ]] || fail "operator/reconcile.h: no default data_dir found to compare the VOLUME with"
  grep -qF "\"$data_dir\"" <<<"$(stage_instr "$final" VOLUME)" ||
    grep -qE "(^|[[:space:]])$data_dir([[:space:]]|$)" <<<"$(stage_instr "$final" VOLUME)" ||
    fail "$dockerfile: no VOLUME $data_dir (the operator's --data-dir, RocksDB of a ps): with a read-only root filesystem it must be a volume"

  version=$(sed -n 's/^project(shadowsync VERSION \([0-9.]*\).*/\1/p' "$src_dir/CMakeLists.txt")
  grep -qE "org\.opencontainers\.image\.version=\"?$version\"?([[:space:]]|$)" <<<"$(stage_instr "$final" LABEL)" ||
    fail "$dockerfile: LABEL org.opencontainers.image.version is not $version (project VERSION in CMakeLists.txt)"
fi
if [[ -f $src_dir/.dockerignore ]]; then
  grep -qE '^/?build/?$' "$src_dir/.dockerignore" ||
    fail ".dockerignore does not exclude build/: a host CMakeCache.txt would leak into the image build"
else
  fail "$src_dir/.dockerignore missing: build/, .tools/ and bench/results/tmp/ would be sent as build context"
fi

# --- binaries the image ships: COPY --from=<build stage> .../build/<preset>/bin/NAME DEST
shipped=()
dests=()
while read -r args; do
  [[ $args =~ --from=([^[:space:]]+) ]] || continue
  [[ ${BASH_REMATCH[1]} == "$build_stage_name" || ${BASH_REMATCH[1]} == 0 ]] || continue
  read -ra words <<<"$args"
  srcs=()
  for w in "${words[@]}"; do [[ $w == --* ]] || srcs+=("$w"); done
  dests+=("${srcs[-1]}")
  for s in "${srcs[@]:0:${#srcs[@]}-1}"; do
    [[ $s =~ /build/[^/]+/bin/([^/]+)$ ]] && shipped+=("${BASH_REMATCH[1]}")
  done
done < <(stage_instr "$final" COPY)
grep -qx shadowsync <<<"$(printf '%s\n' "${shipped[@]}")" ||
  fail "$dockerfile: the final stage does not COPY --from=${build_stage_name:-build} .../build/<preset>/bin/shadowsync"
if [[ -n ${entry_bin:-} ]]; then
  ok=""
  for d in "${dests[@]}"; do
    [[ $d == "$entry_bin" || ($d == */ && $entry_bin == "$d"*) ]] && ok=1
  done
  [[ -n $ok ]] || fail "$dockerfile: ENTRYPOINT $entry_bin is not a binary copied from the build stage"
fi

# --- 1. the runtime package list
block=$(awk '/^#[[:space:]]*BEGIN runtime-packages/ { on = 1; n++; next }
             /^#[[:space:]]*END runtime-packages/ { on = 0; next }
             on { print }
             END { if (n != 1) exit 1 }' "$dockerfile") ||
  die "$dockerfile: want exactly one '# BEGIN runtime-packages' ... '# END runtime-packages' block"
begin_line=$(grep -n '^#[[:space:]]*BEGIN runtime-packages' "$dockerfile" | cut -d: -f1)
last_from_line=$(grep -niE '^[[:space:]]*FROM[[:space:]]' "$dockerfile" | tail -n 1 | cut -d: -f1)
[[ $begin_line -gt $last_from_line ]] ||
  fail "$dockerfile: the runtime-packages block (line $begin_line) is not in the final stage (FROM on line $last_from_line)"
# Join continuations, split into commands at && and ;, keep the words after
# `apt-get install` that are not options (sed, not ${//}: per-line anchors).
runtime_pkgs=()
# shellcheck disable=SC2001
mapfile -t runtime_pkgs < <(sed -e 's/\\[[:space:]]*$//' <<<"$block" | grep -v '^[[:space:]]*#' | tr '\n' ' ' |
  sed -e 's/&&/\n/g' -e 's/;/\n/g' |
  awk '{ for (i = 1; i < NF; i++) if ($i ~ /^apt(-get)?$/ && $(i + 1) == "install") {
           for (j = i + 2; j <= NF; j++) if ($j !~ /^-/) print $j } }')
[[ ${#runtime_pkgs[@]} -gt 0 ]] || die "$dockerfile: no apt-get install list between the runtime-packages markers"
installs=$(stage_instr "$final" RUN | grep -cE 'apt(-get)? +([^&;]* )?install' || true)
[[ $installs -eq 1 ]] ||
  fail "$dockerfile: the final stage has $installs apt-get install commands; want the one between the markers, so the list checked is the list installed"

# --- 3. no build tools, headers or debug symbols; each a Debian 12 package.
# apt-cache is called twice in all: with apt's binary cache off (as on Docker-style
# hosts) every call re-reads the package lists, seconds each on a loaded machine.
build_tool_re='(-dev|-dbg|-doc)(:[a-z0-9]+)?$|^(gcc|g\+\+|cpp|gfortran)(-[0-9]+)?$|^(build-essential|cmake|cmake-data|make|ninja-build|binutils.*|pkg-config|pkgconf|clang.*|llvm.*|lld.*|libtool|autoconf|automake|protobuf-compiler.*|git|npm|nodejs)$'
show=$(apt-cache show --no-all-versions "${runtime_pkgs[@]}" dpkg 2>/dev/null || true)
for p in "${runtime_pkgs[@]}"; do
  if [[ $p =~ $build_tool_re ]]; then
    fail "$dockerfile: runtime package $p is a build tool, header or debug package: it belongs in the build stage only"
  fi
  grep -qxF "Package: $p" <<<"$show" ||
    fail "$dockerfile: runtime package $p is not a Debian 12 package (apt-cache show $p finds no record; a virtual or misspelt name?)"
done

# --- the base set, verified: the hard-dependency closure of BASE_ROOTS.
awk '/^Package: / { p = $2 } p == "dpkg" && /^Essential: yes$/ { ok = 1 } END { exit !ok }' <<<"$show" ||
  fail "apt-cache: dpkg is not Essential here; the debian:12-slim base set cannot be trusted"
# `apt-cache depends --recurse` follows every alternative; walk its output again
# taking only the first alternative of each Depends/Pre-Depends (what apt installs)
# and skipping virtual names, so the closure is never larger than the real one.
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${BASE_ROOTS[@]}" 2>/dev/null |
  awk -v roots="${BASE_ROOTS[*]}" '
    /^[^ ]/ { pkg = $1; prev_alt = 0; next }
    /^ *\|?(Pre)?Depends:/ {
      alt = ($0 ~ /^ *\|/)
      if (!prev_alt && $2 !~ /^</) deps[pkg] = deps[pkg] " " $2
      prev_alt = alt
      next
    }
    END {
      n = split(roots, queue, " ")
      for (i = 1; i <= n; i++) seen[queue[i]] = 1
      for (i = 1; i <= n; i++) {
        m = split(deps[queue[i]], d, " ")
        for (j = 1; j <= m; j++) if (!(d[j] in seen)) { seen[d[j]] = 1; queue[++n] = d[j] }
      }
      for (p in seen) print p
    }')
declare -A in_base=()
for p in "${closure[@]}"; do in_base[$p]=1; done
declare -A base=()
for p in "${BASE_PACKAGES[@]}"; do
  if [[ -n ${in_base[$p]:-} ]]; then
    base[$p]=1
  else
    fail "$0: BASE_PACKAGES claims $p is in debian:12-slim, but it is not a hard dependency of ${BASE_ROOTS[*]}"
  fi
done
declare -A listed=()
for p in "${runtime_pkgs[@]}"; do listed[$p]=1; done

# --- 2. every library every shipped binary loads
alias_path() {  # merged /usr: /lib/x and /usr/lib/x are one file; dpkg knows one name
  case $1 in
    /usr/lib/* | /usr/lib64/*) echo "${1#/usr}" ;;
    /lib/* | /lib64/*) echo "/usr$1" ;;
    *) echo "$1" ;;
  esac
}
declare -A used=()
complete=1  # every shipped binary fully resolved: only then is an unused package certain
nlibs=0
for name in $(printf '%s\n' "${shipped[@]}" | sort -u); do
  bin=$bin_dir/$name
  if [[ ! -x $bin ]]; then
    fail "$bin: not built (the image ships $name); build it first"
    complete=0
    continue
  fi
  ldd_out=$(ldd "$bin" 2>&1) || { fail "ldd $bin failed: $ldd_out"; complete=0; continue; }
  while read -r missing; do
    fail "$name: ldd reports \"$missing\": the library is not installed here, so its package cannot be checked"
    complete=0
  done < <(grep 'not found' <<<"$ldd_out" | sed 's/^[[:space:]]*//')
  mapfile -t libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$ldd_out" | sort -u)
  # One dpkg -S for every spelling of every library: as ldd gives it, its
  # merged-/usr twin, and the same for the resolved symlink (alternatives such as
  # libopenblas.so.0 -> /etc/alternatives -> openblas-pthread/ are owned by no package).
  declare -A cand=()
  all=()
  for l in "${libs[@]}"; do
    r=$(readlink -f "$l")
    cand[$l]="$l $(alias_path "$l") $r $(alias_path "$r")"
    read -ra c <<<"${cand[$l]}"
    all+=("${c[@]}")
  done
  declare -A owner=()
  while IFS=$'\t' read -r pkgs path; do
    owner[$path]=${pkgs%%,*}
  done < <(dpkg -S "${all[@]}" 2>/dev/null | grep -v '^diversion' | sed 's/: \(\/[^ ]*\)$/\t\1/')
  for l in "${libs[@]}"; do
    nlibs=$((nlibs + 1))
    pkg=""
    for c in ${cand[$l]}; do
      [[ -n ${owner[$c]:-} ]] && { pkg=${owner[$c]}; break; }
    done
    pkg=${pkg%%:*}  # libfoo:amd64 -> libfoo (multiarch)
    if [[ -z $pkg ]]; then
      fail "$name: $l belongs to no Debian package (dpkg -S), so no apt-get install can put it in the image"
    elif [[ -n ${listed[$pkg]:-} ]]; then
      used[$pkg]=1
    elif [[ -z ${base[$pkg]:-} ]]; then
      fail "$name loads $l from package $pkg, which is neither in the Dockerfile's runtime-packages list nor in debian:12-slim: add $pkg to the list"
    fi
  done
  unset cand owner
done
for p in "${runtime_pkgs[@]}"; do
  if [[ -n ${base[$p]:-} ]]; then
    fail "$dockerfile: runtime package $p is already in debian:12-slim; drop it from the list"
    continue
  fi
  [[ $complete -eq 1 && -z ${used[$p]:-} ]] || continue
  grep -qx -- "$p" <<<"$(printf '%s\n' "${NON_LIBRARY_PACKAGES[@]}")" && continue
  fail "$dockerfile: runtime package $p provides no library any shipped binary loads; drop it (or list it in NON_LIBRARY_PACKAGES in $0 with a reason)"
done

# --- 5. the linter, with the project's .dockerfilelintrc wherever the file being checked lives
if [[ ! -x $linter ]]; then
  fail "dockerfilelint not installed at $linter: run scripts/install-node-tools.sh"
elif ! lint_out=$(cd "$src_dir" && "$linter" -c "$src_dir" "$dockerfile" 2>&1); then
  fail "dockerfilelint $dockerfile reports issues:"$'\n'"$lint_out"
fi

if [[ $failures -gt 0 ]]; then
  echo "dockerfile_test: $failures failure(s) in $dockerfile" >&2
  exit 1
fi
echo "dockerfile_test: OK: $nstages stages; ${#runtime_pkgs[@]} runtime packages cover the $nlibs libraries of: ${shipped[*]}; dockerfilelint clean"
