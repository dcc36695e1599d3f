"""tests/deploy: the compose file offline, and the same topology as processes on this machine."""
