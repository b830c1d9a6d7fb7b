# shellcheck shell=bash
# The cluster binaries of .ci/run, built in the background while the phases before the tests run
# (the longest phase on a fresh machine, 0.2 s when built), and waited for set by set: npm test
# needs only the control-plane set (etcd, kube-apiserver and friends, kubectl, helm), built first;
# the real-node phases need the real-node set (kubelet, kube-proxy, containerd, and Kueue's manager
# for the Kueue tests, which run on the real node), built right after
# it at the lowest priority (nice 19, and so its session's autogroup where the kernel shares the
# cores by session), so that npm test's timing-sensitive tests keep the cores while it builds.
# Sourced, not run: `start_tools_builds`, then `wait_for_tools SET` before a phase that needs SET,
# `stop_tools_builds` on exit.
#
# Go's build needs nothing npm or apt installs (CGO_ENABLED=0): tools/build.sh is run directly,
# in a session of its own, so that a run that stops early stops the whole build with it. Each
# set's outcome ("STATUS SECONDS-IT-TOOK SECONDS-SINCE-THE-START") goes to $tools_dir/SET.done, its log and folder beside it.

tools_dir=""
tools_pid=""
tools_started=""

start_tools_builds() {
  tools_dir=$(mktemp -d)
  tools_started=$SECONDS
  # shellcheck disable=SC2016 # the session's script expands its own variables
  TOOLS_DIR=$tools_dir setsid bash -c '
    build_set() { # build_set <set> [command prefix...]: tools/build.sh for one set
      local set=$1 started=$SECONDS status=0
      shift
      "$@" env PLAYBOOK_TOOLS_SET="$set" bash tools/build.sh >"$TOOLS_DIR/$set.out" 2>>"$TOOLS_DIR/$set.log" || status=$?
      ((status == 0)) || echo "tools:bin failed: the $set binaries could not be built (see above)" >>"$TOOLS_DIR/$set.log"
      echo "$status $((SECONDS - started)) $SECONDS" >"$TOOLS_DIR/$set.done"
      return "$status"
    }
    not_built() { # not_built <set> <reason>
      printf "%s\n" "$2" >>"$TOOLS_DIR/$1.log"
      echo "1 0 $SECONDS" >"$TOOLS_DIR/$1.done"
    }
    if ! go_bin=$(tools/install-go.sh 2>"$TOOLS_DIR/control-plane.log"); then
      not_built control-plane "tools:bin failed: Go >= 1.26 is missing and could not be installed (see above)"
      not_built real-node "tools:bin failed: Go >= 1.26 is missing and could not be installed"
      exit 1
    fi
    export PATH="$go_bin:$PATH"
    build_set control-plane || { not_built real-node "tools:bin: the real-node binaries were not built: the control-plane set failed first"; exit 1; }
    # The session shares the cores with the others as one autogroup: its weight is lowered too.
    echo 19 >/proc/self/autogroup 2>/dev/null || true
    build_set real-node nice -n 19
  ' >"$tools_dir/session.log" 2>&1 &
  tools_pid=$!
}

stop_tools_builds() {
  [[ -n $tools_pid ]] && kill -- -"$tools_pid" 2>/dev/null
  [[ -n $tools_dir ]] && rm -rf "$tools_dir"
  return 0
}

# wait_for_tools <set>: waits until the set's build has ended, prints its log and how long it took
# and fails when it failed (or when the build session ended without a word about the set).
wait_for_tools() {
  local set=$1 done_file="$tools_dir/$1.done" status seconds at
  until [[ -s $done_file ]]; do
    if ! kill -0 "$tools_pid" 2>/dev/null; then
      [[ -s $done_file ]] && break
      cat "$tools_dir/session.log" "$tools_dir/$set.log" 2>/dev/null
      echo "tools:bin failed: the build of the cluster binaries ended before the $set set was built"
      return 1
    fi
    sleep 1
  done
  read -r status seconds at <"$done_file"
  cat "$tools_dir/$set.log" 2>/dev/null
  ((status == 0)) || return 1
  echo "$set binaries: $(cat "$tools_dir/$set.out") (tools/build.sh took $seconds s, done $at s after the start; waited for here until $((SECONDS - tools_started)) s)"
}
