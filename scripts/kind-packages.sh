#!/usr/bin/env bash
# What the kind backend of the local fleet needs from Debian packages: podman (kind's provider
# here, no Docker daemon), runc (podman's runtime for kind nodes: crun refuses a private cgroup
# namespace on a hybrid cgroup v1/v2 host), debootstrap (the node image's and the fleet
# image's root filesystems), gcc (the pause image), busybox-static (test pods). Installs only
# what is missing; uses sudo when not root. Elsewhere than Debian/Ubuntu it says what to install.
set -euo pipefail
need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "the kind backend needs: ${need[*]}" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${need[*]} (Debian packages)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
