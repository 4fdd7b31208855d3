"""End-to-end tests: real clients, a real broker and the gateway as a process."""
