"""Runs under faults, apart from the rest: the chaos run, kills, failovers, resharding."""
