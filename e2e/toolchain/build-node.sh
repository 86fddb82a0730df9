#!/usr/bin/env bash
# Builds the node binaries of the local fleet's real nodes (kubelet, kube-proxy) from the
# Kubernetes module pinned in node/go.mod beside this script (the same version as the control
# planes' k8s/go.mod, checked below; a module of its own so that its extra go.sum lines do not
# change the control planes' cache stamp), into
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/node-<stamp>/
# The container runtime (containerd, runc, CNI plugins) and iptables come from Debian packages
# (scripts/node-packages.sh). Prints the binary directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "node recipe $recipe"; cat "$here"/node/go.mod "$here"/node/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/node-$stamp"
start_build build-node.sh "$out" kubelet kube-proxy

k8s_version=$(same_kubernetes build-node.sh node)
ldflags=$(k8s_ldflags "$k8s_version")

log "building kubelet, kube-proxy $k8s_version (warm module cache: about 1 minute; cold: several)"
(cd "$here/node" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
finish_build "$out"
