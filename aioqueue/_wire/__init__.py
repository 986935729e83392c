"""The wire format: where a queue lives (keys), what is stored (envelopes), the Lua scripts
and Functions that act on it (`lua/`), the type registry and published schemas, and the
operations on one queue that delivery and the operator tools use. Imports `_transport`
and `_model` only."""
