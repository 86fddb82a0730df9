"""``python -m fleet.hub``: run the hub operator against the cluster in $KUBECONFIG."""

from __future__ import annotations

import argparse
import logging
import os

import kopf

from fleet import allocator, logs, nesting


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fleet.hub", description=__doc__)
    parser.add_argument("--fit-mode", choices=["NodeAware", "Summed"],
                        default=os.environ.get("FLEET_FIT_MODE", "NodeAware"))
    parser.add_argument("--metrics-port", type=int,
                        default=int(os.environ.get("FLEET_METRICS_PORT", "0")))
    parser.add_argument("--liveness", default=os.environ.get("FLEET_LIVENESS", ""),
                        help="e.g. http://127.0.0.1:8080/healthz")
    args = parser.parse_args()
    os.environ["FLEET_FIT_MODE"] = args.fit_mode
    os.environ["FLEET_METRICS_PORT"] = str(args.metrics_port)
    logs.configure("hub")
    nesting.allow_api_depth()
    allocator.limit_arenas()
    from fleet.hub import handlers  # registers the handlers

    del handlers
    kopf.run(standalone=True, clusterwide=True, liveness_endpoint=args.liveness or None)


if __name__ == "__main__":
    logging.captureWarnings(True)
    main()
