#!/usr/bin/env bash
# OpenMPI and sshd from Debian packages, for the real mpirun test (tests/mpirun). Installs
# only what is missing; uses sudo when not root. Elsewhere than Debian/Ubuntu it says what to
# install and leaves the test to skip (CI sets FLEET_MPI_REQUIRED=1, so there it fails).
set -euo pipefail
if command -v mpirun >/dev/null && command -v mpicc >/dev/null && [ -x /usr/sbin/sshd ]; then
  exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install "install OpenMPI (mpirun, mpicc) and OpenSSH's sshd for the real mpirun test" \
  openmpi-bin libopenmpi-dev openssh-server openssh-client
