# shellcheck shell=bash
# apt_install: .ci/run's installs of Debian packages, with the rule test/harness/prerequisites.ts
# keeps for npm test, cluster:up and image:build. apt-get update runs first when the package lists
# are stale (none, or the newest more than a day old, since a fresh machine's image brings lists
# whose archives the mirror has since removed), and once more, with one retry, when an install
# could not fetch; each said on stderr. Sourced, not run.
#
#   apt_install [--no-install-recommends] PACKAGE...
#
# Environment:
#   PLAYBOOK_APT_LISTS_DIR  apt's package lists (default: /var/lib/apt/lists), for the tests

# As root, or through sudo.
apt_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Prints why the package lists want an update; nothing when they are fresh. The `partial` folder
# counts: apt writes in it on every update, while a list that did not change keeps the mirror's date.
apt_lists_staleness() {
  local dir=${PLAYBOOK_APT_LISTS_DIR:-/var/lib/apt/lists}
  if ! find "$dir" -mindepth 1 -maxdepth 1 -type f ! -name lock 2>/dev/null | grep -q .; then
    echo "apt has no package lists in $dir"
    return
  fi
  local newest age hours
  newest=$(find "$dir" -mindepth 1 -maxdepth 1 \( -type f ! -name lock -o -type d -name partial \) \
    -printf '%T@\n' | sort -n | tail -n 1)
  age=$(($(date +%s) - ${newest%.*}))
  [ "$age" -gt 86400 ] || return 0
  hours=$((age / 3600))
  if [ "$hours" -lt 48 ]; then
    echo "apt's package lists are $hours hours old"
  else
    echo "apt's package lists are $((hours / 24)) days old"
  fi
}

# apt-get update, its output on stderr; a failure is said, not fatal: the lists there are may do.
apt_update() {
  apt_as_root apt-get update -qq >&2 ||
    echo "apt-get update failed (exit $?): going on with the lists there are" >&2
}

# Whether apt's errors say it could not fetch a package, or that its lists do not know one: what
# lists older than the mirror give, and an update may cure.
apt_could_not_fetch() {
  grep -q -E 'Unable to fetch|Failed to fetch|404 +Not Found|maybe run apt-get update|Unable to locate package|has no installation candidate' <<<"$1"
}

# One attempt, quiet as .ci/run's log wants: apt's errors are shown, and kept in apt_errors (its
# "E:" lines, else its last line).
apt_errors=""
apt_install_once() {
  local file status
  file=$(mktemp)
  apt_as_root env DEBIAN_FRONTEND=noninteractive apt-get install "$@" >/dev/null 2>"$file"
  status=$?
  cat "$file" >&2
  apt_errors=$(grep '^E: ' "$file" | paste -s -d ' ')
  [ -n "$apt_errors" ] || apt_errors=$(grep . "$file" | tail -n 1)
  [ -n "$apt_errors" ] || apt_errors="exit $status"
  rm -f "$file"
  return "$status"
}

apt_install() {
  local options=(-y -qq)
  if [ "${1:-}" = --no-install-recommends ]; then
    options+=("$1")
    shift
  fi
  local stale retried="" names sudo=""
  stale=$(apt_lists_staleness)
  if [ -n "$stale" ]; then
    echo "$stale: running apt-get update first" >&2
    apt_update
  fi
  apt_install_once "${options[@]}" "$@" && return 0
  if apt_could_not_fetch "$apt_errors"; then
    echo "apt-get install could not fetch ($apt_errors): running apt-get update and trying once more" >&2
    apt_update
    apt_install_once "${options[@]}" "$@" && return 0
    retried=1
  fi
  [ "$(id -u)" -eq 0 ] || sudo="sudo "
  names=$(printf '%s, ' "$@")
  echo "apt-get could not install ${names%, }${retried:+, even after apt-get update}: $apt_errors" >&2
  echo "install them with \`${sudo}apt-get update && ${sudo}apt-get install $*\`" >&2
  return 1
}
