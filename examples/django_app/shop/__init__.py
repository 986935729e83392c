"""The example shop: one Django app that is also its project."""
