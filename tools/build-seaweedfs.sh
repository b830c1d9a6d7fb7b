#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (Apache-2.0) from its Go module (tools/seaweedfs/go.mod) into a cache
# folder of its own, <cache>/seaweedfs-<version>, and prints the binary's path as the only line of
# stdout. It is the S3 server of the log archive's tests and of `npm run cluster:up --
# --with-object-store` (test/harness/object-store.ts). Its own folder and key, as runc's: a new
# SeaweedFS never touches the Kubernetes binaries' folder, whose rebuild takes long. A binary
# already there is not rebuilt; two callers at once build it once (a lock in the folder).
#
# Environment:
#   PLAYBOOK_TOOLS_CACHE  parent folder of the versioned caches (as tools/build.sh)
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:seaweedfs: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

version=$(awk '$1 == "require" && $2 == "github.com/seaweedfs/seaweedfs" { print $3; exit }' "$tools_dir/seaweedfs/go.mod")
[[ -n $version ]] || die "cannot find github.com/seaweedfs/seaweedfs in tools/seaweedfs/go.mod"
cache_root=${PLAYBOOK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/bin}
dir="$cache_root/seaweedfs-$version"
binary="$dir/weed"
if [[ -x $binary ]]; then
  printf '%s\n' "$binary"
  exit 0
fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ ! -x $binary ]]; then
  go_bin=$("$tools_dir/install-go.sh") || die "the Go toolchain (go >= 1.26) is required to build SeaweedFS"
  export PATH="$go_bin:$PATH"
  started=$SECONDS
  log "building SeaweedFS $version (weed) into $dir"
  (cd "$tools_dir/seaweedfs" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$binary.$$.tmp" github.com/seaweedfs/seaweedfs/weed) ||
    die "go build of SeaweedFS $version failed; see the compiler output above"
  mv -f "$binary.$$.tmp" "$binary"
  log "built SeaweedFS $version in $((SECONDS - started))s"
fi
printf '%s\n' "$binary"
