"""The HTTP API and the dashboard (aioqueue/http), through a real `aioqueue serve`."""
