#!/usr/bin/env bash
# OpenMPI and sshd from Debian packages, for the real mpirun test (tests/mpirun). Installs
# only what is missing; uses sudo when not root. Elsewhere than Debian/Ubuntu it says what to
# install and leaves the test to skip (CI sets FLEET_MPI_REQUIRED=1, so there it fails).
set -euo pipefail
if command -v mpirun >/dev/null && command -v mpicc >/dev/null && [ -x /usr/sbin/sshd ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install OpenMPI (mpirun, mpicc) and OpenSSH's sshd for the real mpirun test" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing openmpi-bin libopenmpi-dev openssh-server openssh-client (Debian packages)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  openmpi-bin libopenmpi-dev openssh-server openssh-client >/dev/null
