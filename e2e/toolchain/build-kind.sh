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
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

# Bump when the way binaries are built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "kind recipe $recipe"; cat "$here"/kind/go.mod "$here"/kind/go.sum) | sha256sum | cut -c1-16)
cache_root=${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}
out="$cache_root/kind-$stamp"
binaries=(kind kubeadm)

have_all() { for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build-kind.sh: the Go toolchain (go >= 1.26) is required" >&2; exit 1; }
mkdir -p "$out.partial"
start=$(date +%s)
log() { echo "[toolchain $(( $(date +%s) - start ))s] $*" >&2; }

k8s_version=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/kind/go.mod")
control_planes=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/k8s/go.mod")
if [ "$k8s_version" != "$control_planes" ]; then
  echo "build-kind.sh: kind/go.mod pins Kubernetes $k8s_version, k8s/go.mod $control_planes" >&2
  exit 1
fi
minor=$(echo "$k8s_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

log "building kind"
(cd "$here/kind" && go build -trimpath -ldflags "-s -w" -o "$out.partial/" sigs.k8s.io/kind)
log "building kubeadm $k8s_version"
(cd "$here/kind" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldflags" \
   -o "$out.partial/" k8s.io/kubernetes/cmd/kubeadm)
rm -rf "$out" && mv "$out.partial" "$out"
log "done: $out"
echo "$out"
