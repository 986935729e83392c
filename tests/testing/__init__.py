"""aioqueue.testing and the pytest plugin: the embedded server, the chaos proxy, run_due."""
