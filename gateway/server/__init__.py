"""The only layer with sockets: listeners, connection pairs, lifecycle."""
