"""Container images for the local fleet's real nodes, built here without a registry.

Each image is a docker-archive tarball (``manifest.json``, a config JSON whose
``rootfs.diff_ids`` are the sha256 of the layer tars, the layer tars) written with
``tarfile``, which ``ctr images import`` loads into a node's containerd. Built images are
cached outside the repository under ``~/.cache/fleet/images/<name>-<hash of inputs>.tar``
(``FLEET_IMAGE_CACHE`` names another directory, e.g. one per checkout, as each keeps one build
of each image):

* ``pause`` — a static C program that waits for a signal (the pod sandbox);
* ``busybox`` — Debian's ``busybox-static`` (test pods);
* ``fleet`` — the content of the repository's Dockerfile in three layers: a Debian root
  filesystem with python3 (debootstrap, the machine's Debian mirror), the project's
  dependencies from PyPI, the project itself; run as user 65532.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FLEET_IMAGE_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fleet" / "images")
PAUSE = "fleet.local/pause:1"
BUSYBOX = "fleet.local/busybox:1"
FLEET = "fleet:0.1.0"  # the name deploy/ runs
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python-is-python3", "ca-certificates")
# Bump when the way an image is built changes.
RECIPE = 1

PAUSE_C = r"""
#include <signal.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    for (;;) pause();
}
"""


@dataclass(frozen=True)
class Image:
    name: str
    archive: Path

    @property
    def size(self) -> int:
        return self.archive.stat().st_size


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def write_archive(out: Path, name: str, layers: list[Path], *, cmd: list[str],
                  user: str = "", env: Iterable[str] = ()) -> None:
    """A docker-archive of ``layers`` (uncompressed layer tars, bottom first)."""
    diff_ids = [_file_digest(layer) for layer in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "User": user, "WorkingDir": "/",
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                           *env]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": "e2e/localfleet/images.py"} for _ in layers],
    }, sort_keys=True).encode()
    config_name = _digest(config).split(":", 1)[1] + ".json"
    layer_names = [f"{d.split(':', 1)[1]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": layer_names}]).encode()
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for data, arcname in ((config, config_name), (manifest, "manifest.json")):
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for layer, arcname in zip(layers, layer_names, strict=True):
            tar.add(layer, arcname)
    partial.rename(out)


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer_from_dir(root: Path, out: Path, *, skip: Callable[[str], bool] = lambda _: False) -> None:
    """A layer tar of ``root``'s content (paths relative to it), owned by root."""
    with tarfile.open(out, "w") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            for entry in sorted(dirnames + filenames):
                rel = os.path.normpath(os.path.join(rel_dir, entry))
                if skip(rel):
                    if entry in dirnames:
                        dirnames.remove(entry)
                    continue
                tar.add(os.path.join(dirpath, entry), rel, recursive=False, filter=_root_owned)


def _cached(name: str, key: str) -> Path:
    """The cache file of ``name`` for inputs ``key``; earlier builds of ``name`` (other keys)
    are removed, so the cache holds one of each."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.tar"
    for old in CACHE.glob(f"{name}-*.tar"):
        stem = old.name[len(name) + 1:-len(".tar")]
        if old != path and len(stem) == 16 and all(c in "0123456789abcdef" for c in stem):
            old.unlink(missing_ok=True)
    return path


def pause_image() -> Image:
    out = _cached("pause", f"{RECIPE} {PAUSE_C}")
    if not out.exists():
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "root"
            root.mkdir()
            (Path(tmp) / "pause.c").write_text(PAUSE_C)
            subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(root / "pause"),
                            str(Path(tmp) / "pause.c")], check=True)
            layer = Path(tmp) / "layer.tar"
            layer_from_dir(root, layer)
            write_archive(out, PAUSE, [layer], cmd=["/pause"], user="65535:65535")
    return Image(PAUSE, out)


def busybox_image() -> Image:
    busybox = Path("/bin/busybox")
    out = _cached("busybox", f"{RECIPE} {_file_digest(busybox)}")
    if not out.exists():
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "root"
            (root / "bin").mkdir(parents=True)
            shutil.copy2(busybox, root / "bin" / "busybox")
            for applet in ("sh", "sleep", "cat", "echo", "ls", "wget", "nc", "env", "id"):
                (root / "bin" / applet).symlink_to("busybox")
            (root / "tmp").mkdir(mode=0o1777)
            layer = Path(tmp) / "layer.tar"
            layer_from_dir(root, layer)
            write_archive(out, BUSYBOX, [layer], cmd=["/bin/sh"])
    return Image(BUSYBOX, out)


def _debian_mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def _project_sources() -> list[Path]:
    files = [REPO / "pyproject.toml", REPO / "README.md"]
    for package in ("fleet", "propagation", "quota", "planner", "preemption", "member-agent"):
        files.extend(p for p in sorted((REPO / package).rglob("*"))
                     if p.is_file() and "__pycache__" not in p.parts
                     and ".egg-info" not in str(p))
    return files


def _pyproject_dependencies() -> list[str]:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


SITE = "usr/local/lib/python3.11/dist-packages"
_PRUNE = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/",
          "var/cache/apt/", "var/lib/apt/lists/", "var/cache/debconf/", "var/log/")


def _prune(rel: str) -> bool:
    return rel in ("dev", "proc", "sys") or any(
        (rel + "/").startswith(p) and rel + "/" != p for p in _PRUNE)


def _debian_layer(say: Callable[[str], None]) -> Path:
    """Debian with python3 (debootstrap from the machine's mirror), as one layer."""
    out = _cached("fleet-debian-layer", f"{RECIPE} {DEBIAN_SUITE} {DEBIAN_PACKAGES}")
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp) / "root"
        say(f"fleet image: debootstrap {DEBIAN_SUITE} with {', '.join(DEBIAN_PACKAGES)} "
            "(a few minutes, once)")
        subprocess.run(["debootstrap", "--variant=minbase",
                        f"--include={','.join(DEBIAN_PACKAGES)}",
                        DEBIAN_SUITE, str(root), _debian_mirror()],
                       check=True, stdout=subprocess.DEVNULL)
        layer = Path(tmp) / "layer.tar"
        layer_from_dir(root, layer, skip=_prune)
        layer.rename(out)
    return out


# Wheels that run on Debian bookworm's python3 (3.11, glibc 2.36).
_PLATFORMS = ("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
              "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64")


def _compile(site: Path) -> None:
    """Bytecode for the image's python3 (3.11, as this interpreter's minor version must be):
    the image's root filesystem is read-only, and compiling the kubernetes client at every
    start takes long."""
    if sys.version_info[:2] != (3, 11):
        return  # the image's python3 compiles at start instead
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site)],
                   check=True, stdout=subprocess.DEVNULL)


def _dependencies_layer(say: Callable[[str], None]) -> Path:
    """The project's dependencies (PyPI wheels for the image's python3), as one layer."""
    dependencies = _pyproject_dependencies()
    out = _cached("fleet-dependencies-layer",
                  f"{RECIPE} compiled {_PLATFORMS} {dependencies}")
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp) / "root"
        say("fleet image: the project's dependencies from PyPI")
        platforms = [arg for p in _PLATFORMS for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                        "--target", str(root / SITE), "--only-binary=:all:",
                        "--python-version", "3.11", "--implementation", "cp", *platforms,
                        *dependencies], check=True)
        _compile(root / SITE)
        layer = Path(tmp) / "layer.tar"
        layer_from_dir(root, layer, skip=lambda rel: rel.startswith(f"{SITE}/bin"))
        layer.rename(out)
    return out


USER_ID = 65532


def _add_user(base_layer: Path, root: Path, uid: int, name: str) -> None:
    """/etc/passwd and /etc/group of ``base_layer`` with ``name`` as ``uid``: kopf asks
    getpass.getuser() for its identity, which fails for a user without an entry."""
    with tarfile.open(base_layer) as tar:
        for path, line in (("etc/passwd", f"{name}:x:{uid}:{uid}::/tmp:/usr/sbin/nologin"),
                           ("etc/group", f"{name}:x:{uid}:")):
            member = tar.extractfile(path)
            assert member is not None
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(member.read().decode().rstrip("\n") + f"\n{line}\n")
            target.chmod(0o644)


def fleet_image(say: Callable[[str], None] = print) -> Image:
    """The Dockerfile's content: python3, the dependencies, the project, user 65532."""
    debian, dependencies = _debian_layer(say), _dependencies_layer(say)
    sources = hashlib.sha256()
    for path in _project_sources():
        sources.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    out = _cached("fleet", f"{RECIPE} compiled user {USER_ID} {debian.name} {dependencies.name} "
                           f"{sources.hexdigest()}")
    if out.exists():
        return Image(FLEET, out)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        say("fleet image: the project's layer")
        src, root = Path(tmp) / "src", Path(tmp) / "root"
        for path in _project_sources():
            target = src / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-compile", "--target", str(root / SITE),
                        str(src)], check=True, cwd=tmp)
        _compile(root / SITE)
        _add_user(debian, root, USER_ID, "fleet")
        layer = Path(tmp) / "layer.tar"
        layer_from_dir(root, layer, skip=lambda rel: rel.startswith(f"{SITE}/bin"))
        write_archive(out, FLEET, [debian, dependencies, layer], cmd=["python", "-m", "fleet.hub"],
                      user=f"{USER_ID}:{USER_ID}", env=["PYTHONDONTWRITEBYTECODE=1"])
    return Image(FLEET, out)


def main() -> None:
    for image in (pause_image(), busybox_image(), fleet_image()):
        print(f"{image.name}: {image.archive} ({image.size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
