"""``make bench``: fleet's performance budgets (DESIGN.md §8), each measured beside a baseline
run in the same process, printed as one JSON object per line and a readable table."""
