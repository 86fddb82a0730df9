#!/usr/bin/env bash
# Builds Kubeflow Trainer's controller manager and JobSet's controller from the Go modules
# pinned in trainer/go.mod beside this script, for the e2e test of a member that runs its own
# Trainer (fleet.sh/trainjob-runner: member-trainer). Into
#   ${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}/trainer-<stamp>/{trainer,jobset}
# with `trainer-module-dir` and `jobset-module-dir` naming the modules in the module cache,
# whose CRDs and webhook manifests the test reads there (nothing of them is copied into the
# repository). Prints the binary directory on stdout (progress goes to stderr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

recipe=1
stamp=$( (echo "trainer recipe $recipe"; cat "$here"/trainer/go.mod "$here"/trainer/go.sum) | sha256sum | cut -c1-16)
out="$cache_root/trainer-$stamp"
start_build build-trainer.sh "$out" trainer jobset

log "building Kubeflow Trainer's controller manager and JobSet's controller (cold: a few CPU-minutes)"
(cd "$here/trainer" \
  && go build -trimpath -ldflags "-s -w" -o "$out.partial/trainer" \
       github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager \
  && go build -trimpath -ldflags "-s -w" -o "$out.partial/jobset" sigs.k8s.io/jobset \
  && go list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2 > "$out.partial/trainer-module-dir" \
  && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset > "$out.partial/jobset-module-dir")
finish_build "$out"
