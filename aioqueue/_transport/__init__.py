"""Transport: connections, Sentinel, cluster routing and node pipelines, the step driver
that runs a conversation with Redis, the gate that bounds a service's calls, the
subscription that carries wake-ups, and recovery after a lost connection. Imports nothing of
aioqueue but `_model`."""
