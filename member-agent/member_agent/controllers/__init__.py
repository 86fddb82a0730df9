"""Job controllers on the member: one pure core (``core``) and a small module per kind."""
