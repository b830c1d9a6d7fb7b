#!/usr/bin/env bash
# Builds runc from its Go module (tools/runc/go.mod) with seccomp into <cache>/runc-<version>
# (tools/cached-go-build.sh) and prints the binary's path as the only line of stdout. The real
# node's containerd runs it (test/harness/real-node): pods with their own user namespace
# (hostUsers: false) need idmapped mounts, which runc does from 1.2 on (Debian 12's is 1.1.5).
# Seccomp needs cgo and libseccomp's headers (Debian's libseccomp-dev).
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:runc: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=tools/cached-go-build.sh
source "$tools_dir/cached-go-build.sh"

version=$(awk '$1 == "github.com/opencontainers/runc" { print $2; exit }' "$tools_dir/runc/go.mod")
[[ -n $version ]] || die "cannot find github.com/opencontainers/runc in tools/runc/go.mod"

build_runc() {
  command -v cc >/dev/null || die "a C compiler is required to build runc with seccomp (cgo): install the Debian package gcc"
  echo '#include <seccomp.h>' | cc -E -x c - >/dev/null 2>&1 ||
    die "libseccomp's headers are required to build runc with seccomp: install the Debian package libseccomp-dev"
  (cd "$tools_dir/runc" && CGO_ENABLED=1 go build -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${version#v}" -o "$1" github.com/opencontainers/runc)
}
cached_go_build "runc $version (with seccomp)" "runc-$version" runc build_runc
