# Sourced by the *-packages.sh scripts: install Debian packages (sudo when not root), or, where
# there is no apt-get, say what to install and leave it at that.
# Usage: apt_install "<what to say without apt-get>" package...
apt_install() {
  local why=$1
  shift
  [ $# -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "$why" >&2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing $* (Debian packages)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
