"""The member agent: pulls its cluster's Works from the hub, runs the jobs in them with its own
job controllers, and reports capacity, heartbeat and status back to the hub."""
