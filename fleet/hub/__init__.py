"""The hub operator: watches jobs, policies, member clusters and Works; binds each job to
member clusters, dispatches its Works, and aggregates what the agents report."""
