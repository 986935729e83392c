"""Recurring schedules (aioqueue/_recurring) and their operator side."""
