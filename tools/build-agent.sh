#!/usr/bin/env bash
# Builds the task containers' agent (agent/agent.c) static with musl into dist/agent/agent, and
# places Debian's static busybox beside it as dist/agent/busybox when busybox-static is installed
# (the agent runs tasks under it where an image has no /bin/sh). Prints the agent's path as the
# only line of stdout. Rebuilds only when agent.c is newer than the binary.
#
# Environment:
#   PLAYBOOK_AGENT_OUT  output folder (default: dist/agent in the repository)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${PLAYBOOK_AGENT_OUT:-$repo/dist/agent}
src=$repo/agent/agent.c
log() { printf '%s\n' "build-agent: $*" >&2; }

if ! command -v musl-gcc >/dev/null; then
  log "error: musl-gcc not found: install the Debian package musl-tools (apt-get install musl-tools)"
  exit 1
fi
mkdir -p "$out"
if [ ! -x "$out/agent" ] || [ "$src" -nt "$out/agent" ]; then
  # A temporary name, then a rename: a test that runs the agent never sees half a file.
  tmp=$(mktemp "$out/.agent.XXXXXX")
  musl-gcc -static -Os -s -Wall -Wextra -Werror -o "$tmp" "$src"
  chmod 755 "$tmp"
  mv -f "$tmp" "$out/agent"
  log "built $out/agent"
fi
busybox=""
for candidate in /bin/busybox /usr/bin/busybox; do
  # A dynamic busybox names its loader (ld-linux, ld-musl); Debian's busybox-static does not.
  if [ -x "$candidate" ] && ! LC_ALL=C grep -q -a -E '/ld-(linux|musl)' "$candidate"; then
    busybox=$candidate
    break
  fi
done
if [ -n "$busybox" ]; then
  if [ ! -x "$out/busybox" ] || [ "$busybox" -nt "$out/busybox" ]; then
    cp "$busybox" "$out/.busybox.tmp" && chmod 755 "$out/.busybox.tmp" && mv -f "$out/.busybox.tmp" "$out/busybox"
  fi
else
  log "no static busybox here (Debian package busybox-static): $out/busybox not placed"
fi
printf '%s\n' "$out/agent"
