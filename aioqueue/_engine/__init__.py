"""The Redis side: key layout, envelopes, the Lua scripts (`lua/`) and the store that runs
them, the type registry, and the producer that writes events. Everything that talks to Redis
about one queue goes through `store.QueueStore`. Imports only `_model`."""
