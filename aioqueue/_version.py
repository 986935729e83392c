"""The version, written only here: pyproject.toml reads it (without importing the package),
`aioqueue.__version__` re-exports it, and a worker's heartbeat names it."""

__version__ = "0.2.0.dev0"
