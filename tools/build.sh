#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and helm from
# their Go modules into a per-version cache folder outside the repository, and prints that
# folder as the only line of stdout. Binaries already present are not rebuilt.
#
# Environment:
#   PLAYBOOK_TOOLS_CACHE  parent folder of the versioned cache (default: $XDG_CACHE_HOME or
#                         ~/.cache, then playbook-controller/bin)
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:bin: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Go from PATH or /usr/local/go when new enough, else the toolchain module from the Go proxy.
go_bin=$("$tools_dir/install-go.sh") ||
  die "the Go toolchain (go >= 1.26) is required to build the Kubernetes, etcd and helm binaries and could not be found or fetched; install it from https://go.dev/dl"
export PATH="$go_bin:$PATH"

module_version() { # module_version <dir> <module path>
  local v
  v=$(awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$tools_dir/$1/go.mod")
  [[ -n $v ]] || die "cannot find $2 in tools/$1/go.mod"
  printf '%s' "$v"
}
k8s_version=$(module_version kubernetes k8s.io/kubernetes)
etcd_version=$(module_version etcd go.etcd.io/etcd/server/v3)
helm_version=$(module_version helm helm.sh/helm/v3)

cache_root=${PLAYBOOK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/bin}
bin_dir="$cache_root/k8s-$k8s_version-etcd-$etcd_version-helm-$helm_version"
mkdir -p "$bin_dir"

# Two callers (CI and a test's global setup, say) must not build the same binary at once.
exec 9>"$bin_dir/.lock"
flock 9

export CGO_ENABLED=0
started=$SECONDS
built=0

build() { # build <module dir> <binary name> <package> <ldflags>
  local dir=$1 name=$2 pkg=$3 ldflags=$4 t0=$SECONDS
  [[ -x "$bin_dir/$name" ]] && return 0
  log "building $name from $pkg (this takes several minutes on a cold Go cache)"
  (cd "$tools_dir/$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin_dir/.$name.tmp" "$pkg") ||
    die "go build of $name ($pkg) failed; see the compiler output above"
  mv -f "$bin_dir/.$name.tmp" "$bin_dir/$name"
  log "built $name in $((SECONDS - t0))s"
  built=$((built + 1))
}

# Version stamping as Kubernetes' hack/lib/version.sh does, so /version and `kubectl version`
# report the release; the module zip carries no commit, so the release time stands in for buildDate.
k8s_minor=${k8s_version#v1.}
k8s_minor=${k8s_minor%%.*}
k8s_info=$(cd "$tools_dir/kubernetes" && go mod download -json "k8s.io/kubernetes@$k8s_version" |
  sed -n 's/^\t"Info": "\(.*\)",$/\1/p')
k8s_date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$k8s_info")
k8s_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$k8s_date"
done

for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build kubernetes "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$k8s_ldflags"
done
build etcd etcd . ""
build helm helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"

if ((built > 0)); then
  log "built $built binaries in $((SECONDS - started))s into $bin_dir"
fi
printf '%s\n' "$bin_dir"
