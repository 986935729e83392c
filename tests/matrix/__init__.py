"""The server matrix itself (tests/support/server_matrix.py and `--servers`)."""
