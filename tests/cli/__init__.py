"""The `aioqueue` command (aioqueue/_cli): each command as a real process, the demo, `./dev`."""
