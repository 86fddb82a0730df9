#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian packages, for the dashboard's browser tests
# (e2e/test_dashboard.py) and its screenshot (make dashboard-screenshot). Installs only what is
# missing; uses sudo when not root.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install "install Chromium and chromedriver for the dashboard's browser tests" \
  chromium chromium-driver
