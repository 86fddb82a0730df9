"""The local fleet (real control planes with kwok nodes) and the multi-cluster test suite."""
