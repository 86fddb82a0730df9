"""``python -m member_agent --cluster NAME``: run the agent of one member cluster.

$KUBECONFIG reaches the member; $FLEET_HUB_KUBECONFIG (or --hub-kubeconfig) reaches the hub
with the agent's own, namespace-scoped identity.
"""

from __future__ import annotations

import argparse
import os

import kopf

from fleet import allocator, logs, nesting


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m member_agent", description=__doc__)
    parser.add_argument("--cluster", default=os.environ.get("FLEET_CLUSTER_NAME"), required=False)
    parser.add_argument("--hub-kubeconfig", default=os.environ.get("FLEET_HUB_KUBECONFIG"))
    parser.add_argument("--metrics-port", type=int,
                        default=int(os.environ.get("FLEET_METRICS_PORT", "0")))
    parser.add_argument("--liveness", default=os.environ.get("FLEET_LIVENESS", ""))
    args = parser.parse_args()
    if not args.cluster or not args.hub_kubeconfig:
        parser.error("--cluster and --hub-kubeconfig (or their FLEET_* variables) are required")
    os.environ["FLEET_CLUSTER_NAME"] = args.cluster
    os.environ["FLEET_HUB_KUBECONFIG"] = args.hub_kubeconfig
    os.environ["FLEET_METRICS_PORT"] = str(args.metrics_port)
    logs.configure(f"agent-{args.cluster}")
    nesting.allow_api_depth()
    allocator.limit_arenas()
    from member_agent import handlers  # registers the handlers

    del handlers
    kopf.run(standalone=True, clusterwide=True, liveness_endpoint=args.liveness or None)


if __name__ == "__main__":
    main()
