#!/usr/bin/env bash
# Builds the pinned `helm` that lints, renders and installs the charts under deploy/helm, from
# the Go module pinned in helm/go.mod beside this script (a module of its own so that its go.sum
# does not change the control planes' cache stamp), into
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/helm-<stamp>/helm
# <stamp> is a hash of the pins, so helm is rebuilt only when they change. Prints the binary
# directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

# Bump when the way helm is built changes (flags, tags); the pins are the go.mod/go.sum files.
recipe=1
stamp=$( (echo "helm recipe $recipe"; cat "$here"/helm/go.mod "$here"/helm/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/helm-$stamp"
start_build build-helm.sh "$out" helm

helm_version=$(sed -n 's/^\s*helm.sh\/helm\/v4 \(v[^ ]*\).*/\1/p' "$here/helm/go.mod")
pkg=helm.sh/helm/v4/internal/version
ldflags="-s -w -X $pkg.version=$helm_version -X $pkg.metadata= -X $pkg.gitTreeState=clean"

log "building helm $helm_version (cold: about 3 CPU-minutes, 4-8 minutes on 2 busy cores)"
(cd "$here/helm" && go build -trimpath -ldflags "$ldflags" -o "$out.partial/" helm.sh/helm/v4/cmd/helm)
finish_build "$out"
