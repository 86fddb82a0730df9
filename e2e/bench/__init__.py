"""``make bench``: fleet's budgets (docs/architecture.md), each measured beside a baseline
run in the same process, printed as one JSON object per line and a readable table."""
