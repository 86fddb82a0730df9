"""fleet: a multi-cluster federation controller for distributed training jobs.

The hub side lives here: API models shared with the agent (``fleet.api``), the per-kind
adapters (``fleet.kinds``), the only modules that talk to an API server (``fleet.clients``),
and the hub operator (``fleet.hub``). Pure decisions live in ``propagation`` and ``quota``.
"""
