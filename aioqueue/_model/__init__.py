"""The vocabulary every layer shares: events and their context, errors, durations, the
service's frozen settings, and the protocols a user plugs in (serializer, retry policy,
metrics, instrumentation). Imports nothing else from aioqueue."""
