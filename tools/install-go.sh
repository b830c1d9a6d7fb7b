#!/usr/bin/env bash
# Makes a Go toolchain new enough for tools/*/go.mod available and prints its bin folder.
# Uses `go` from PATH or /usr/local/go when it is new enough; otherwise fetches the toolchain
# module golang.org/toolchain from the Go module proxy (what GOTOOLCHAIN=goX.Y.Z does) into
# the cache, so CI works on a machine without Go. Needs curl and unzip for that path.
set -euo pipefail

tools_dir=$(cd "$(dirname "$0")" && pwd)
required=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$tools_dir/kubernetes/go.mod")
log() { printf '%s\n' "install-go: $*" >&2; }

new_enough() { # new_enough <go binary>
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [[ $(printf '%s\n%s\n' "$required" "$v" | sort -V | head -1) == "$required" ]]
}

for candidate in "$(command -v go || true)" /usr/local/go/bin/go; do
  if [[ -n $candidate && -x $candidate ]] && new_enough "$candidate"; then
    dirname "$candidate"
    exit 0
  fi
done

version=${PLAYBOOK_GO_VERSION:-$required}
[[ $version == *.*.* ]] || version="$version.0"
arch=$(uname -m)
case $arch in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
root=${XDG_CACHE_HOME:-$HOME/.cache}/playbook-controller/go/go$version
if [[ -x $root/bin/go ]] && new_enough "$root/bin/go"; then
  echo "$root/bin"
  exit 0
fi
for tool in curl unzip; do
  command -v "$tool" >/dev/null || { log "Go >= $required is missing and '$tool' is needed to fetch it"; exit 1; }
done
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}
[[ $proxy == http* ]] || { log "Go >= $required is missing and GOPROXY=${GOPROXY:-} names no proxy to fetch it from"; exit 1; }
url="$proxy/golang.org/toolchain/@v/v0.0.1-go$version.linux-$arch.zip"
log "Go >= $required not found; fetching $url"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL -o "$tmp/toolchain.zip" "$url" || { log "could not download $url"; exit 1; }
unzip -q "$tmp/toolchain.zip" -d "$tmp/x"
mkdir -p "$(dirname "$root")"
rm -rf "$root"
mv "$tmp/x/golang.org/toolchain@v0.0.1-go$version.linux-$arch" "$root"
# Module zips carry no file modes.
chmod -R u+x "$root/bin" "$root/pkg/tool"
new_enough "$root/bin/go" || { log "the fetched toolchain does not run"; exit 1; }
echo "$root/bin"
