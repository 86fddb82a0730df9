#!/usr/bin/env bash
# Builds the control-plane binaries the local fleet runs on, from Go modules pinned in the
# go.mod/go.sum files beside this script, into a cache outside the repository:
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/<stamp>/
# <stamp> is a hash of the pins, so the binaries are rebuilt only when the pins change.
# Prints the binary directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "recipe $recipe"; cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/etcd/go.mod \
          "$here"/etcd/go.sum "$here"/kwok/go.mod "$here"/kwok/go.sum) | sha256sum | cut -c1-16)
cache_root=${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}
out="$cache_root/$stamp"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl)

have_all() { for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: the Go toolchain (go >= 1.26) is required" >&2; exit 1; }
mkdir -p "$out.partial"
start=$(date +%s)
log() { echo "[toolchain $(( $(date +%s) - start ))s] $*" >&2; }

k8s_version=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/k8s/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

log "building etcd"
(cd "$here/etcd" && go build -trimpath -o "$out.partial/etcd" go.etcd.io/etcd/server/v3)
log "building kwok, kwokctl"
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$out.partial/" \
   sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl)
log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $k8s_version (cold: about 10 minutes on 2 cores)"
(cd "$here/k8s" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
   k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
rm -rf "$out" && mv "$out.partial" "$out"
log "done: $out"
echo "$out"
