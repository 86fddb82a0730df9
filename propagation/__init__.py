"""Pure placement decisions: which policy governs a job, which clusters may take it, and how
its replicas divide across them.

Inputs are frozen views built by the hub from its caches; outputs are decisions with reasons,
deterministic for equal inputs. Nothing here reads a clock or talks to an API server.
"""
