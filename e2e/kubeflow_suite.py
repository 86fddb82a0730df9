"""The Kubeflow training operator's own SDK e2e suite, unchanged, against a local fleet's hub.

    make up
    make kubeflow-suite CHECKOUT=path/to/training-operator   # a checkout at tag v1.9.0

The suite (``sdk/python/test/e2e`` of kubeflow/training-operator) drives a training-operator
cluster through the ``kubeflow-training`` SDK; here the cluster is the hub. A namespace gets a
PropagationPolicy that gang-places the six Kubeflow v1 kinds and mirrors their pods, and the
plain-scheduling lane runs in it (``GANG_SCHEDULER_NAME=none``; the gang lane's
``minAvailable`` behaviour is fleet's own test, ``e2e/test_run_policy.py``). Nothing of the
operator is copied into this repository: the checkout is read where it is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from e2e.jobs import KUBEFLOW_KINDS, gang_namespace
from e2e.kubeflow_sdk import SUITE_TOOLS, sdk_python
from e2e.localfleet import HUB, REPO
from fleet.clients import errors
from fleet.clients.kube import Kube

SUITE = Path("sdk") / "python"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kubeflow_suite",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True,
                        help="a kubeflow/training-operator checkout (tag v1.9.0)")
    parser.add_argument("--workdir", type=Path, default=REPO / ".fleet",
                        help="the local fleet's directory (make up's)")
    parser.add_argument("--namespace", default="kubeflow-suite")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    suite = args.checkout / SUITE
    if not (suite / "test" / "e2e").is_dir():
        print(f"error: {args.checkout} has no {SUITE}/test/e2e (a training-operator checkout "
              "at v1.9.0?)", file=sys.stderr)
        return 2
    kubeconfig = args.workdir / f"{HUB}.kubeconfig"
    if not kubeconfig.exists():
        print(f"error: no local fleet in {args.workdir} (run `make up` first)", file=sys.stderr)
        return 2
    try:
        gang_namespace(Kube(str(kubeconfig)), args.namespace, kinds=KUBEFLOW_KINDS,
                       mirror_pods=True)
    except errors.ApiError as exc:
        print(f"error: the hub refused the suite's namespace: {exc}", file=sys.stderr)
        return 2
    python = sdk_python(*SUITE_TOOLS)
    print(f"running {suite / 'test' / 'e2e'} against the hub, namespace {args.namespace}",
          flush=True)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig.resolve()), "GANG_SCHEDULER_NAME": "none"}
    return subprocess.run([str(python), "-m", "pytest", "test/e2e", "--namespace",
                           args.namespace, *args.pytest_args], cwd=suite, env=env,
                          check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
