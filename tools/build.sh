#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy, etcd, helm,
# containerd (with its runc shim and ctr, for the real node) and Kueue's manager from
# their Go modules into a per-version cache folder outside the repository, and prints that
# folder as the only line of stdout. Binaries already present are not rebuilt.
#
# The binaries come in two sets, each built under a lock of its own: control-plane (what the
# cluster, image and bench tests run: kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, etcd, helm) and real-node (kubelet, kube-proxy, containerd, containerd-shim-runc-v2,
# ctr, and kueue: the tests that run Kueue run on the real node; and runc, built by
# tools/build-runc.sh into a folder of its own and linked here). PLAYBOOK_TOOLS_SET names the one to build; all (the default) builds both, one after the
# other. A set whose binaries are all present is not locked, so asking for one never waits on
# a build of the other.
#
# Progress goes to stderr: which binaries are building, packages compiled out of those that
# need compiling, elapsed time; a bar on a terminal, a plain line every 15s otherwise. The
# binaries of one module are built by one `go build` (they share most packages), and modules
# are built side by side, up to half the machine's cores at once (go build itself uses them all).
#
# Environment:
#   PLAYBOOK_TOOLS_CACHE    parent folder of the versioned cache (default: $XDG_CACHE_HOME or
#                           ~/.cache, then playbook-controller/bin)
#   PLAYBOOK_TOOLS_SET      control-plane, real-node or all (the default)
#   PLAYBOOK_TOOLS_JOBS     modules built at once (default: half the cores, at least 1)
#   PLAYBOOK_TOOLS_TARGETS  what to build instead of the twelve binaries (for tests): a list of
#                           NAME=DIR:PACKAGE, DIR relative to tools/ or absolute; a NAME of a set
#                           belongs to it, any other NAME only to all
#   PLAYBOOK_TOOLS_PROGRESS_EVERY  seconds between plain progress lines (default 15)
#   PLAYBOOK_TOOLS_LOCK_REPORT_EVERY  seconds between the lines saying who holds the build lock
#                           while this waits for it (default 30; the first is said at once)
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
log() { printf '%s\n' "tools:bin: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# The sets by binary name; `all` is both, then whatever PLAYBOOK_TOOLS_TARGETS names besides.
control_plane_names="kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm"
real_node_names="kubelet kube-proxy containerd containerd-shim-runc-v2 ctr kueue"
tools_set=${PLAYBOOK_TOOLS_SET:-all}
case $tools_set in
  control-plane | real-node) parts=("$tools_set") ;;
  all) parts=(control-plane real-node other) ;;
  *) die "PLAYBOOK_TOOLS_SET=$tools_set is not a set of binaries: expected control-plane, real-node or all" ;;
esac

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
containerd_version=$(module_version containerd github.com/containerd/containerd/v2)
kueue_version=$(module_version kueue sigs.k8s.io/kueue)

cache_root=${PLAYBOOK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/bin}
bin_dir="$cache_root/k8s-$k8s_version-etcd-$etcd_version-helm-$helm_version-containerd-$containerd_version-kueue-$kueue_version"
mkdir -p "$bin_dir"

targets=${PLAYBOOK_TOOLS_TARGETS:-"
  kube-apiserver=kubernetes:k8s.io/kubernetes/cmd/kube-apiserver
  kube-controller-manager=kubernetes:k8s.io/kubernetes/cmd/kube-controller-manager
  kube-scheduler=kubernetes:k8s.io/kubernetes/cmd/kube-scheduler
  kubectl=kubernetes:k8s.io/kubernetes/cmd/kubectl
  kubelet=kubernetes:k8s.io/kubernetes/cmd/kubelet
  kube-proxy=kubernetes:k8s.io/kubernetes/cmd/kube-proxy
  etcd=etcd:.
  helm=helm:helm.sh/helm/v3/cmd/helm
  containerd=containerd:github.com/containerd/containerd/v2/cmd/containerd
  containerd-shim-runc-v2=containerd:github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  ctr=containerd:github.com/containerd/containerd/v2/cmd/ctr
  kueue=kueue:sigs.k8s.io/kueue/cmd/kueue
"}

# Two callers (CI and a test's global setup, say) must not build the same binary at once: each
# set is built under its own lock, $bin_dir/.lock.<set>, taken only when something of the set is
# missing. A caller that finds the lock taken says at once, then every
# PLAYBOOK_TOOLS_LOCK_REPORT_EVERY seconds (default 30), who holds it (pid, command line, since
# when, who ran it) and what it builds, instead of waiting in silence.
lock_file="" holder_file="" part_targets=""
lock_report_every=${PLAYBOOK_TOOLS_LOCK_REPORT_EVERY:-30}

# lock_holder_pid: the pid holding the lock on $lock_file (empty when none is seen). /proc/locks
# names the process that took it, which for `flock 9` in a script is the flock command, gone at
# once while the script keeps the lock through its fd 9: then the holder is the longest-running
# process that has the file open and is not waiting for it (nor this script).
lock_holder_pid() {
  local inode taker waiting pid oldest="" most=-1 secs
  inode=$(stat -c %i "$lock_file" 2>/dev/null) || return 0
  taker=$(awk -v inode="$inode" '$2 == "FLOCK" { n = split($6, id, ":"); if (id[n] == inode) { print $5; exit } }' /proc/locks 2>/dev/null)
  if [[ -n $taker ]] && ps -p "$taker" >/dev/null 2>&1; then
    printf '%s' "$taker"
    return 0
  fi
  waiting=" $(awk -v inode="$inode" '$2 == "->" { n = split($7, id, ":"); if (id[n] == inode) printf "%s ", $6 }' /proc/locks 2>/dev/null)"
  for pid in $(find /proc/[0-9]*/fd -maxdepth 1 -lname "$lock_file" 2>/dev/null | cut -d/ -f3 | sort -un); do
    [[ $pid == "$$" || $waiting == *" $pid "* ]] && continue
    # A waiting script's own shell: its flock child is the one in the wait list.
    [[ -n $(ps -o pid= --ppid "$pid" 2>/dev/null | tr -s ' \n' ' ' | awk -v w="$waiting" '{ for (i = 1; i <= NF; i++) if (index(w, " " $i " ")) { print "w"; exit } }') ]] && continue
    secs=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ') || continue
    [[ -n $secs ]] && ((secs > most)) && { most=$secs; oldest=$pid; }
  done
  printf '%s' "$oldest"
}

# process_line <pid>: "pid 123 (bash tools/build.sh), running since Mon Nov 30 23:24:01 2026 (6m51s)".
process_line() {
  local args since secs
  args=$(ps -o args= -p "$1" 2>/dev/null) || return 1
  since=$(ps -o lstart= -p "$1" 2>/dev/null | sed 's/^ *//') || return 1
  secs=$(ps -o etimes= -p "$1" 2>/dev/null | tr -d ' ') || return 1
  printf 'pid %s (%s), running since %s (%s)' "$1" "$args" "$since" "$(elapsed "${secs:-0}")"
}

elapsed() { # elapsed <seconds>
  local s=$1
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# The binaries of the set's targets not yet in $bin_dir: what whoever holds its lock is building.
missing_names() {
  local target names=""
  for target in $part_targets; do
    [[ -x "$bin_dir/${target%%=*}" ]] || names+="${names:+ }${target%%=*}"
  done
  printf '%s' "$names"
}

holder_field() { # holder_field <name>: a field of the holder's note, empty when there is none
  [[ -f $holder_file ]] || return 0
  sed -n "s/^$1=//p" "$holder_file" 2>/dev/null | head -1 || true
}

report_lock_holder() { # report_lock_holder <seconds waited>
  local pid line="" parent="" what="" noted
  noted=$(holder_field pid)
  if [[ -n $noted && -d /proc/$noted && $(readlink "/proc/$noted/fd/9" 2>/dev/null) == "$lock_file" ]]; then
    pid=$noted # a tools/build.sh that left its note, still holding the file
    what=$(holder_field building)
  else
    pid=$(lock_holder_pid)
  fi
  if [[ -n $pid ]] && line=$(process_line "$pid"); then
    # The holder may end while it is being described: what was read so far is said.
    parent=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') || parent=""
    if [[ -n $parent ]]; then parent=$(ps -o args= -p "$parent" 2>/dev/null) || parent=""; fi
  elif [[ -n $noted ]]; then
    # The holder runs where this script cannot see it (another PID namespace): its note says who.
    line="pid $noted per its note in $holder_file ($(holder_field command)), running since $(holder_field since)"
    parent=$(holder_field run_by)
    what=$(holder_field building)
  else
    line="a process not visible from here"
  fi
  if [[ -z $what ]]; then
    what=$(missing_names)
    what=${what:+"what is missing in $bin_dir: $what"}
  fi
  log "waiting for the build lock $lock_file ($(elapsed "$1") so far), held by $line${parent:+, run by: $parent}${what:+; it builds $what}"
}

# note_holder <what it builds>: who holds the lock, for those who wait on it.
note_holder() {
  printf 'pid=%s\nsince=%s\ncommand=%s\nrun_by=%s\nbuilding=%s\n' "$$" "$(date -u '+%F %T UTC')" \
    "$(ps -o args= -p $$ 2>/dev/null)" "$(ps -o args= -p "$PPID" 2>/dev/null)" "$1" >"$holder_file.$$"
  mv -f "$holder_file.$$" "$holder_file"
}

export CGO_ENABLED=0
cores=$(nproc 2>/dev/null || echo 1)
jobs=${PLAYBOOK_TOOLS_JOBS:-$(((cores + 1) / 2))}
((jobs >= 1)) || jobs=1
progress_every=${PLAYBOOK_TOOLS_PROGRESS_EVERY:-15}

# Version stamping as Kubernetes' hack/lib/version.sh does, so /version and `kubectl version`
# report the release; the module zip carries no commit, so the release time stands in for buildDate.
k8s_ldflags() {
  local minor info date flags="" pkg
  minor=${k8s_version#v1.}
  minor=${minor%%.*}
  info=$(cd "$tools_dir/kubernetes" && go mod download -json "k8s.io/kubernetes@$k8s_version" |
    sed -n 's/^\t"Info": "\(.*\)",$/\1/p')
  date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  printf '%s' "$flags"
}

module_ldflags() { # module_ldflags <dir>
  case $1 in
    kubernetes) k8s_ldflags ;;
    helm) printf '%s' "-X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" ;;
    # The kubelet reports this as the node's containerRuntimeVersion (containerd://2.4.2).
    containerd) printf '%s' "-X github.com/containerd/containerd/v2/version.Version=${containerd_version#v}" ;;
    # Kueue logs it at start; the module zip carries no commit.
    kueue) printf '%s' "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version" ;;
    *) ;;
  esac
}

module_tags() { # module_tags <dir>: build tags; containerd's storage drivers that need cgo are left out
  case $1 in
    containerd) printf '%s' "no_btrfs,no_devmapper,no_zfs" ;;
    *) ;;
  esac
}

# The targets of one set (control-plane, real-node, or other: what PLAYBOOK_TOOLS_TARGETS names
# besides the two), each checked for its NAME=DIR:PACKAGE shape.
set_targets() { # set_targets <set>
  local target name names
  case $1 in
    control-plane) names=" $control_plane_names " ;;
    real-node) names=" $real_node_names " ;;
    *) names="" ;;
  esac
  for target in $targets; do
    [[ -n ${target%%=*} && $target == *=*:* && -n ${target#*:} && -n ${target%%:*} ]] ||
      die "PLAYBOOK_TOOLS_TARGETS: '$target' is not NAME=DIR:PACKAGE"
    name=${target%%=*}
    if [[ -n $names ]]; then
      [[ $names == *" $name "* ]] || continue
    elif [[ " $control_plane_names $real_node_names " == *" $name "* ]]; then
      continue
    fi
    printf '%s\n' "$target"
  done
}

# The missing binaries of $part_targets, grouped by module folder, in the order first named.
declare -A group_names=() group_pkgs=()
groups=()
group_missing() {
  local target name rest dir pkg
  group_names=() group_pkgs=() groups=()
  for target in $part_targets; do
    name=${target%%=*}
    rest=${target#*=}
    dir=${rest%%:*}
    pkg=${rest#*:}
    [[ -n $dir && -n $pkg ]] || die "PLAYBOOK_TOOLS_TARGETS: '$target' is not NAME=DIR:PACKAGE"
    [[ -x "$bin_dir/$name" ]] && continue
    [[ -v "group_names[$dir]" ]] || groups+=("$dir")
    group_names[$dir]+="${group_names[$dir]:+ }$name"
    group_pkgs[$dir]+="${group_pkgs[$dir]:+ }$pkg"
  done
}

# take_lock <set>: the set's lock on fd 9, waited for with a report of who holds it.
take_lock() {
  local wait_started
  lock_file="$bin_dir/.lock.$1"
  holder_file="$lock_file.holder"
  exec 9>"$lock_file"
  if ! flock -n 9; then
    wait_started=$SECONDS
    report_lock_holder 0
    until flock -w "$lock_report_every" 9; do
      report_lock_holder $((SECONDS - wait_started))
    done
    log "got the build lock after $(elapsed $((SECONDS - wait_started)))"
  fi
  note_holder "checking what is missing"
}

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

module_path() { # module_path <dir>: absolute, or under tools/
  if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "$tools_dir/$1"; fi
}

# build_group <index>: one go build for the missing binaries of one module folder. Writes the
# packages it has to compile to $state/<i>.total and each one compiled to $state/<i>.done.
build_group() {
  local i=$1 dir=${groups[$1]} t0=$SECONDS ldflags tags
  local -a names pkgs
  read -r -a names <<<"${group_names[$dir]}"
  read -r -a pkgs <<<"${group_pkgs[$dir]}"
  cd "$(module_path "$dir")"
  ldflags=$(module_ldflags "$dir")
  tags=$(module_tags "$dir")
  # What needs compiling: the packages the build cache does not hold yet.
  go list -trimpath -tags "$tags" -deps -f '{{if .Stale}}{{.ImportPath}}{{end}}' "${pkgs[@]}" | sort -u | wc -l >"$state/$i.total" ||
    echo 0 >"$state/$i.total"
  : >"$state/$i.done"
  # Named for this process: a build of another set (or an older build.sh) may run beside it.
  local out="$bin_dir/.$$.$i.tmp"
  rm -rf "$out"
  local -a output=(-o "$out")
  if ((${#pkgs[@]} > 1)); then
    mkdir -p "$out"
    output=(-o "$out/")
  fi
  # -v names each package as it is compiled; everything else it prints is the compiler's.
  if ! go build -v -trimpath -tags "$tags" -ldflags "-s -w $ldflags" "${output[@]}" "${pkgs[@]}" 2>&1 |
    while IFS= read -r line; do
      if [[ $line =~ ^[[:alnum:]._~/-]+$ ]]; then
        printf '%s\n' "$line" >>"$state/$i.done"
      else
        printf '%s\n' "$line" >&2
      fi
    done; then
    log "error: go build of ${names[*]} (${pkgs[*]}) failed; see the compiler output above"
    return 1
  fi
  if ((${#pkgs[@]} > 1)); then
    # go build names each binary after its package path's last element (a /vN suffix dropped).
    local k built_as
    for k in "${!names[@]}"; do
      built_as=${pkgs[$k]%/}
      [[ ${built_as##*/} =~ ^v[0-9]+$ ]] && built_as=${built_as%/*}
      mv -f "$out/${built_as##*/}" "$bin_dir/${names[$k]}"
    done
    rm -rf "$out"
  else
    mv -f "$out" "$bin_dir/${names[0]}"
  fi
  echo "$((SECONDS - t0))" >"$state/$i.took"
}

count_lines() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }
read_number() { [[ -s $1 ]] && cat "$1" || echo 0; }

on_terminal=false
[[ -t 2 ]] && on_terminal=true
declare -A pids=()
next=0
failed=0
started=$SECONDS
last_line=$SECONDS

progress_line() {
  local done=0 total=0 i building=() counted=false
  for i in "${!groups[@]}"; do
    [[ -v "pids[$i]" ]] && building+=("${group_names[${groups[$i]}]}")
    [[ -f "$state/$i.total" ]] || continue
    counted=true
    done=$((done + $(count_lines "$state/$i.done")))
    total=$((total + $(read_number "$state/$i.total")))
  done
  ((done <= total)) || total=$done
  if ! $counted; then
    $on_terminal || log "building ${building[*]}: counting the packages to compile"
    return 0
  fi
  if $on_terminal; then
    local width=24 filled=0
    ((total > 0)) && filled=$((done * width / total))
    local bar
    bar=$(printf '%*s' "$filled" '' | tr ' ' '#')$(printf '%*s' $((width - filled)) '' | tr ' ' '-')
    printf '\r\033[K%s' "tools:bin: [$bar] $done/$total packages, $(elapsed $((SECONDS - started))): ${building[*]}" >&2
  else
    log "building ${building[*]}: $done/$total packages compiled, $(elapsed $((SECONDS - started))) elapsed"
  fi
}

clear_bar() { if $on_terminal; then printf '\r\033[K' >&2; fi; }

# build_missing: builds the groups found by group_missing, up to $jobs at once.
build_missing() {
  local i
  rm -rf "${state:?}"/*
  pids=()
  next=0
  failed=0
  started=$SECONDS
  last_line=$SECONDS
  while ((next < ${#groups[@]})) || ((${#pids[@]} > 0)); do
    while ((next < ${#groups[@]} && ${#pids[@]} < jobs)); do
      clear_bar
      log "building ${group_names[${groups[$next]}]} from ${group_pkgs[${groups[$next]}]} (several minutes on a cold Go cache)"
      build_group "$next" &
      pids[$next]=$!
      next=$((next + 1))
    done
    for i in "${!pids[@]}"; do
      kill -0 "${pids[$i]}" 2>/dev/null && continue
      clear_bar
      if wait "${pids[$i]}"; then
        $on_terminal && progress_line && clear_bar
        log "built ${group_names[${groups[$i]}]} in $(elapsed "$(read_number "$state/$i.took")"): $(count_lines "$state/$i.done")/$(read_number "$state/$i.total") packages compiled"
      else
        failed=1
      fi
      unset "pids[$i]"
    done
    ((${#pids[@]} > 0)) || continue
    if $on_terminal; then
      progress_line
    elif ((SECONDS - last_line >= progress_every)); then
      progress_line
      last_line=$SECONDS
    fi
    sleep 1
  done
  clear_bar
  ((failed == 0)) || die "some binaries could not be built; see above"
}

# Each set in turn: nothing is locked for a set that has all its binaries; one that lacks some
# takes its lock, then looks again (whoever held the lock may have built them) and builds the rest.
built=false
all_started=$SECONDS
for part in "${parts[@]}"; do
  part_targets=$(set_targets "$part")
  group_missing
  ((${#groups[@]} > 0)) || continue
  take_lock "$part"
  group_missing
  if ((${#groups[@]} > 0)); then
    what_builds=""
    for dir in "${groups[@]}"; do what_builds+="${what_builds:+; }${group_names[$dir]} (from ${group_pkgs[$dir]})"; done
    note_holder "$what_builds"
    build_missing
    built=true
  fi
  exec 9>&-
done

# The real node's runc (tools/build-runc.sh) lives in a cache folder of its own, keyed by its own
# version; the folder here links to it, so that the real node finds every binary in one place.
if [[ -z ${PLAYBOOK_TOOLS_TARGETS:-} && " ${parts[*]} " == *" real-node "* ]]; then
  runc_binary=$(bash "$tools_dir/build-runc.sh") || die "runc could not be built; see above"
  [[ $(readlink "$bin_dir/runc" 2>/dev/null) == "$runc_binary" ]] || ln -sfn "$runc_binary" "$bin_dir/runc"
fi

# SeaweedFS's weed (tools/build-seaweedfs.sh), the log archive's S3 server in the tests and in
# `cluster:up --with-object-store`: a cache folder of its own too, linked here with the control plane.
if [[ -z ${PLAYBOOK_TOOLS_TARGETS:-} && " ${parts[*]} " == *" control-plane "* ]]; then
  weed_binary=$(bash "$tools_dir/build-seaweedfs.sh") || die "SeaweedFS could not be built; see above"
  [[ $(readlink "$bin_dir/weed" 2>/dev/null) == "$weed_binary" ]] || ln -sfn "$weed_binary" "$bin_dir/weed"
fi

if $built; then
  what="everything missing"
  [[ $tools_set == all ]] || what="the $tools_set set's missing binaries"
  log "built $what in $(elapsed $((SECONDS - all_started))) into $bin_dir"
fi
printf '%s\n' "$bin_dir"
