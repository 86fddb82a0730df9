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
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "node recipe $recipe"; cat "$here"/node/go.mod "$here"/node/go.sum) | sha256sum | cut -c1-16)
cache_root=${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}
out="$cache_root/node-$stamp"
binaries=(kubelet kube-proxy)

have_all() { for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build-node.sh: the Go toolchain (go >= 1.26) is required" >&2; exit 1; }
mkdir -p "$out.partial"
start=$(date +%s)
log() { echo "[toolchain $(( $(date +%s) - start ))s] $*" >&2; }

k8s_version=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/node/go.mod")
control_planes=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/k8s/go.mod")
if [ "$k8s_version" != "$control_planes" ]; then
  echo "build-node.sh: node/go.mod pins Kubernetes $k8s_version, k8s/go.mod $control_planes" >&2
  exit 1
fi
minor=$(echo "$k8s_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

log "building kubelet, kube-proxy $k8s_version (warm module cache: about 1 minute; cold: several)"
(cd "$here/node" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
rm -rf "$out" && mv "$out.partial" "$out"
log "done: $out"
echo "$out"
