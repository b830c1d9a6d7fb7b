#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (Apache-2.0) from its Go module (tools/seaweedfs/go.mod) into
# <cache>/seaweedfs-<version> (tools/cached-go-build.sh) and prints the binary's path as the only
# line of stdout. It is the S3 server of the log archive's tests and of `npm run cluster:up --
# --with-object-store` (test/harness/object-store.ts).
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:seaweedfs: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=tools/cached-go-build.sh
source "$tools_dir/cached-go-build.sh"

version=$(awk '$1 == "require" && $2 == "github.com/seaweedfs/seaweedfs" { print $3; exit }' "$tools_dir/seaweedfs/go.mod")
[[ -n $version ]] || die "cannot find github.com/seaweedfs/seaweedfs in tools/seaweedfs/go.mod"

build_weed() {
  (cd "$tools_dir/seaweedfs" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$1" github.com/seaweedfs/seaweedfs/weed)
}
cached_go_build "SeaweedFS $version (weed)" "seaweedfs-$version" weed build_weed
