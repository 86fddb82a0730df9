"""Which kubeconfig, context and namespace a command uses, as kubectl chooses them.

The kubeconfig is ``--kubeconfig``, else ``$KUBECONFIG`` (several files joined by ``:`` are
merged), else ``~/.kube/config``. The context is ``--context``, else the file's current one.
The namespace is ``-n``, else the context's namespace, else ``default``; ``-A`` means all.

Members: ``logs`` reads a pod from the member that runs it, and the hub holds no credentials
for members. A member's API server is reached through ``--member-kubeconfig NAME=FILE``
when given, else through the context named like the member in the same kubeconfig (so one
kubeconfig with contexts ``hub``, ``member1``, ``member2`` serves every command).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fleet.clients.kube import Kube, KubeconfigError, kubeconfig_contexts


class CliError(Exception):
    """A failure to print as one ``error: ...`` line (exit code 1)."""


def kubeconfig_path(flag: str | None, environ: Mapping[str, str] | None = None,
                    home: Path | None = None) -> str:
    environ = os.environ if environ is None else environ
    if flag:
        if not Path(flag).exists():
            raise CliError(f"kubeconfig {flag} does not exist")
        return flag
    from_env = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    existing = [p for p in from_env if Path(p).exists()]
    if existing:
        return os.pathsep.join(existing)
    default = (home or Path.home()) / ".kube" / "config"
    if default.exists():
        return str(default)
    where = f"KUBECONFIG={environ.get('KUBECONFIG')} names no existing file" if from_env \
        else f"{default} does not exist"
    raise CliError(f"no kubeconfig: {where}; pass --kubeconfig FILE or set KUBECONFIG")


def member_kubeconfigs(values: Sequence[str]) -> dict[str, str]:
    """``NAME=FILE`` pairs of ``--member-kubeconfig``."""
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise CliError(f"--member-kubeconfig {value!r}: expected NAME=FILE")
        out[name] = path
    return out


@dataclass
class Target:
    """The hub as the flags name it, and how to reach members."""

    kubeconfig: str
    context: str | None = None
    namespace_flag: str | None = None
    all_namespaces: bool = False
    members: dict[str, str] = field(default_factory=dict)
    _hub: Kube | None = None

    def hub(self) -> Kube:
        if self._hub is None:
            self._hub = _connect(self.kubeconfig, self.context)
        return self._hub

    def namespace(self) -> str | None:
        """None for all namespaces."""
        if self.all_namespaces:
            return None
        if self.namespace_flag:
            return self.namespace_flag
        context = self._context_body()
        settings = context.get("context")
        namespace = settings.get("namespace") if isinstance(settings, dict) else None
        return str(namespace or "default")

    def member(self, cluster: str) -> Kube:
        if cluster in self.members:
            return _connect(self.members[cluster], None)
        names = {c.get("name") for c in kubeconfig_contexts(self.kubeconfig)[0]}
        if cluster in names:
            return _connect(self.kubeconfig, cluster)
        raise CliError(f"no credentials for member {cluster}: pass --member-kubeconfig "
                       f"{cluster}=FILE or add a context named {cluster} to the kubeconfig")

    def _context_body(self) -> dict[str, object]:
        contexts, current = _contexts(self.kubeconfig)
        if self.context is None:
            return dict(current or {})
        for context in contexts:
            if context.get("name") == self.context:
                return dict(context)
        raise CliError(f"context {self.context!r} not found in the kubeconfig")


def _contexts(kubeconfig: str) -> tuple[list[dict[str, object]], dict[str, object] | None]:
    try:
        return kubeconfig_contexts(kubeconfig)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None


def _connect(kubeconfig: str, context: str | None) -> Kube:
    try:
        return Kube(kubeconfig, context=context, timeout=20.0)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None
