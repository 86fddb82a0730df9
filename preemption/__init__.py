"""Pure: fleet-wide preemption planning (which running jobs to remove, across clusters, so
that a higher-priority job fits node by node). No I/O, no clock, deterministic."""
