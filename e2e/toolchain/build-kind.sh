#!/usr/bin/env bash
# Builds what the kind backend of the local fleet needs from Go modules pinned in kind/go.mod
# beside this script: kind itself (sigs.k8s.io/kind) and kubeadm (the node image's cluster
# bootstrapper, from the same Kubernetes version as the control planes' k8s/go.mod, checked
# below), into
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/kind-<stamp>/
# The rest of the node image comes from build.sh / build-node.sh (etcd, control planes,
# kubelet, kube-proxy) and Debian packages (e2e/localfleet/kindnode.py). Prints the binary
# directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "kind recipe $recipe"; cat "$here"/kind/go.mod "$here"/kind/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/kind-$stamp"
start_build build-kind.sh "$out" kind kubeadm

k8s_version=$(same_kubernetes build-kind.sh kind)
ldflags=$(k8s_ldflags "$k8s_version")

log "building kind"
(cd "$here/kind" && go build -trimpath -ldflags "-s -w" -o "$out.partial/" sigs.k8s.io/kind)
log "building kubeadm $k8s_version"
(cd "$here/kind" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kubeadm)
finish_build "$out"
