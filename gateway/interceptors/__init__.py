"""Interceptors: what the gateway does with an API instead of forwarding it opaque.

Opaque pass-through is the default. Each API the gateway touches declares so once, as a
``Filter`` (``filter``) in its own module of ``apis``: its API key, from which version
its responses are rewritten and in which part (whole, head or tail), and the hooks
that answer its requests or add to its responses. ``registry`` collects the modules and
derives every table the runtime uses from them: the pass-through tables, which
responses are rewritten, which the compiled lane may walk or head-replace, which
requests are answered here. ``dispatch`` is what the connection calls, applying those
tables to its frames; a new intercepted API is one new module in ``apis``.

The byte-level work is sans-I/O and shared: ``endpoints`` rewrites broker addresses
(``addresses`` picks its helper by the filter's mode), ``api_versions``,
``describe_cluster`` and ``update_features`` build and read their APIs' bodies,
``unsupported`` and ``reject`` answer what no filter does, and ``upstream`` builds the
gateway's own requests to the broker. ``context`` is all a hook sees of its connection.
"""
