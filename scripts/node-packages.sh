#!/usr/bin/env bash
# The container runtime of the local fleet's real nodes and what builds their images, from
# Debian packages: containerd, runc, CNI plugins, iptables and conntrack (kube-proxy), nsenter
# (util-linux), debootstrap (the fleet image's root filesystem), busybox-static (test pods),
# gcc (the pause image). Installs only what is missing; uses sudo when not root. Elsewhere than
# Debian/Ubuntu it says what to install and leaves the local fleet to run host processes.
set -euo pipefail
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
{ [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ]; } || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
. "$(dirname "$0")/apt-install.sh"
apt_install "real nodes need: ${need[*]} (install them, or the local fleet runs host processes)" \
  "${need[@]}"
