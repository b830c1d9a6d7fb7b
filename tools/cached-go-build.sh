# Sourced by tools/build-runc.sh and tools/build-seaweedfs.sh: one Go binary built into a cache
# folder of its own, <cache>/<name>-<version>, keyed by its own version so a new one never
# touches the Kubernetes binaries' folder, whose rebuild takes long. A binary already there is
# not rebuilt; two callers at once build it once (a lock in the folder). Prints the binary's path
# as the only line of stdout.
#
# Environment:
#   PLAYBOOK_TOOLS_CACHE  parent folder of the versioned caches (as tools/build.sh)

# cached_go_build <label> <folder name> <binary name> <build function>
# The build function runs in the cache folder's lock with Go on PATH and the path to write as
# its one argument; it checks its own prerequisites.
cached_go_build() {
  local label=$1 folder=$2 name=$3 build=$4
  local tools_dir cache_root dir binary go_bin started
  tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  cache_root=${PLAYBOOK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/bin}
  dir="$cache_root/$folder"
  binary="$dir/$name"
  if [[ ! -x $binary ]]; then
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
    if [[ ! -x $binary ]]; then
      go_bin=$("$tools_dir/install-go.sh") || die "the Go toolchain (go >= 1.26) is required to build $label"
      export PATH="$go_bin:$PATH"
      started=$SECONDS
      log "building $label into $dir"
      "$build" "$binary.$$.tmp" || die "go build of $label failed; see the compiler output above"
      mv -f "$binary.$$.tmp" "$binary"
      log "built $label in $((SECONDS - started))s"
    fi
    exec 9>&-
  fi
  printf '%s\n' "$binary"
}
