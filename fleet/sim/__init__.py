"""A trace-driven simulator of fleet's decisions: the pure ``quota`` and ``propagation`` code
driven by a virtual clock over a GPU cluster trace (``make simulate``)."""
