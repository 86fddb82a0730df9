#!/usr/bin/env bash
# Builds Kueue's own scheduler scalability test (its runner and minimalkueue) from the Go
# module pinned in kueue/go.mod beside this script, for the bench that runs it side by side
# with fleet on the same machine. Into
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/kueue-<stamp>/{runner,minimalkueue,minimalkueue-unlimited}
# minimalkueue sets its client to 50 QPS / burst 100 in code; minimalkueue-unlimited is the
# same program with that one assignment made -1 (client-go: no rate limiter), built from the
# module cache's own file edited in a throwaway copy of this module (Go refuses overlays of the
# module cache), so that both sides of the bench can run with unlimited clients (fleet's hub
# has no client-side limit).
# Prints the binary directory on stdout (progress goes to stderr). The test's configurations
# and CRDs are read from the module cache (`kueue-module-dir` in that directory names it).
# The runner finds its project by PROJECT_DIR (the module directory with a trailing /) and
# its control plane by KUBEBUILDER_ASSETS (the local fleet's kube-apiserver and etcd).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

recipe=2
stamp=$( (echo "kueue recipe $recipe"; cat "$here"/kueue/go.mod "$here"/kueue/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/kueue-$stamp"
start_build build-kueue.sh "$out" runner minimalkueue minimalkueue-unlimited

pkg=sigs.k8s.io/kueue/test/performance/scheduler
log "building Kueue's scheduler performance runner and minimalkueue (cold: several CPU-minutes)"
(cd "$here/kueue" && go build -trimpath -ldflags "-s -w" -o "$out.partial/runner" "$pkg/runner" \
  && go build -trimpath -ldflags "-s -w" -o "$out.partial/minimalkueue" "$pkg/minimalkueue" \
  && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue > "$out.partial/kueue-module-dir")
main="$(cat "$out.partial/kueue-module-dir")/test/performance/scheduler/minimalkueue/main.go"
copy="$out.partial/unlimited"  # a throwaway module beside the pinned one: same go.mod and go.sum
mkdir -p "$copy/minimalkueue"
cp "$here/kueue/go.mod" "$here/kueue/go.sum" "$copy/"
sed -e 's/kubeConfig\.QPS = 50$/kubeConfig.QPS = -1/' "$main" > "$copy/minimalkueue/main.go"
grep -q 'kubeConfig.QPS = -1$' "$copy/minimalkueue/main.go" \
  || { echo "build-kueue.sh: minimalkueue no longer sets 'kubeConfig.QPS = 50'" >&2; exit 1; }
(cd "$copy" && go build -trimpath -ldflags "-s -w" -o "$out.partial/minimalkueue-unlimited" ./minimalkueue)
rm -rf "$copy"
finish_build "$out"
