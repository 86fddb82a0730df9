# Sourced by the build-*.sh scripts: the Go build environment, the binary cache outside the
# repository, progress on stderr, and the version flags Kubernetes binaries are stamped with.
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
cache_root=${FLEET_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet/bin}

# start_build <script> <out> <binary>...: when every binary is in <out> already, print <out> and
# exit; otherwise check for Go and start filling <out>.partial.
start_build() {
  local script=$1 dir=$2 binary missing=""
  shift 2
  for binary in "$@"; do [ -x "$dir/$binary" ] || missing=1; done
  if [ -z "$missing" ]; then echo "$dir"; exit 0; fi
  command -v go >/dev/null || { echo "$script: the Go toolchain (go >= 1.26) is required" >&2; exit 1; }
  mkdir -p "$dir.partial"
  start=$(date +%s)
}

log() { echo "[toolchain $(( $(date +%s) - start ))s] $*" >&2; }

# finish_build <out>: the finished binaries take the place of any older copy.
finish_build() {
  rm -rf "$1" && mv "$1.partial" "$1"
  log "done: $1"
  echo "$1"
}

# kubernetes_of <go.mod>: the Kubernetes version the module requires.
kubernetes_of() { sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$1"; }

# same_kubernetes <script> <module dir>: the Kubernetes version the module pins, which must be
# the control planes' (k8s/go.mod); exits naming both otherwise.
same_kubernetes() {
  local mine theirs
  mine=$(kubernetes_of "$here/$2/go.mod")
  theirs=$(kubernetes_of "$here/k8s/go.mod")
  if [ "$mine" != "$theirs" ]; then
    echo "$1: $2/go.mod pins Kubernetes $mine, k8s/go.mod $theirs" >&2
    exit 1
  fi
  echo "$mine"
}

# k8s_ldflags <version>: what `kubectl version` and the API server report.
k8s_ldflags() {
  local pkg=k8s.io/component-base/version minor
  minor=$(echo "$1" | cut -d. -f2)
  echo "-s -w -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$1"
}
