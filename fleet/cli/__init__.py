"""``kubectl fleet`` (installed as the ``kubectl-fleet`` plugin): see :mod:`fleet.cli.main`.

Modules: ``main`` (flags and dispatch, errors as one line), ``config`` (kubeconfig, context,
namespace, member credentials), ``kinds`` (names), ``commands`` (what each command reads and
prints), ``output`` (tables and ``-o`` formats), ``completion`` (shell scripts).
"""

from fleet.cli.main import main

__all__ = ["main"]
