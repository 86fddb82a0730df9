#!/usr/bin/env bash
# Builds the control-plane binaries the local fleet runs on, from Go modules pinned in the
# go.mod/go.sum files beside this script, into a cache outside the repository:
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/<stamp>/
# <stamp> is a hash of the pins, so the binaries are rebuilt only when the pins change.
# Prints the binary directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "recipe $recipe"; cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/etcd/go.mod \
          "$here"/etcd/go.sum "$here"/kwok/go.mod "$here"/kwok/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/$stamp"
start_build build.sh "$out" kube-apiserver kube-controller-manager kube-scheduler kubectl etcd \
  kwok kwokctl
k8s_version=$(kubernetes_of "$here/k8s/go.mod")
ldflags=$(k8s_ldflags "$k8s_version")

log "building etcd"
(cd "$here/etcd" && go build -trimpath -o "$out.partial/etcd" go.etcd.io/etcd/server/v3)
log "building kwok, kwokctl"
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$out.partial/" \
   sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl)
log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $k8s_version (cold: about 10 minutes on 2 cores)"
(cd "$here/k8s" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
   k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
finish_build "$out"
