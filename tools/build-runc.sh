#!/usr/bin/env bash
# Builds runc from its Go module (tools/runc/go.mod) with seccomp into a cache folder of its own,
# <cache>/runc-<version>, and prints the binary's path as the only line of stdout. The real node's
# containerd runs it (test/harness/real-node): pods with their own user namespace (hostUsers:
# false) need idmapped mounts, which runc does from 1.2 on (Debian 12's is 1.1.5). Its own folder
# and key: a new runc never touches the Kubernetes binaries' folder, whose rebuild takes long.
# Seccomp needs cgo and libseccomp's headers (Debian's libseccomp-dev). A binary already there is
# not rebuilt; two callers at once build it once (a lock in the folder).
#
# Environment:
#   PLAYBOOK_TOOLS_CACHE  parent folder of the versioned caches (as tools/build.sh)
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:runc: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

version=$(awk '$1 == "github.com/opencontainers/runc" { print $2; exit }' "$tools_dir/runc/go.mod")
[[ -n $version ]] || die "cannot find github.com/opencontainers/runc in tools/runc/go.mod"
cache_root=${PLAYBOOK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/bin}
dir="$cache_root/runc-$version"
binary="$dir/runc"
if [[ -x $binary ]]; then
  printf '%s\n' "$binary"
  exit 0
fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ ! -x $binary ]]; then
  go_bin=$("$tools_dir/install-go.sh") || die "the Go toolchain (go >= 1.26) is required to build runc"
  export PATH="$go_bin:$PATH"
  command -v cc >/dev/null || die "a C compiler is required to build runc with seccomp (cgo): install the Debian package gcc"
  echo '#include <seccomp.h>' | cc -E -x c - >/dev/null 2>&1 ||
    die "libseccomp's headers are required to build runc with seccomp: install the Debian package libseccomp-dev"
  started=$SECONDS
  log "building runc $version (with seccomp) into $dir"
  (cd "$tools_dir/runc" && CGO_ENABLED=1 go build -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${version#v}" -o "$binary.$$.tmp" github.com/opencontainers/runc) ||
    die "go build of runc $version failed; see the compiler output above"
  mv -f "$binary.$$.tmp" "$binary"
  log "built runc $version in $((SECONDS - started))s"
fi
printf '%s\n' "$binary"
