"""Interceptors: one module per API (or concern) the gateway decodes instead of forwarding."""
