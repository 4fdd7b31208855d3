"""One module per intercepted API, each declaring its ``Filter`` once as ``FILTER``.

The registry (``gateway.interceptors.registry``) imports every module here that does not
start with ``_``, so a new intercepted API is one new file: its ``Filter`` (key, the
versions and mode of the responses it rewrites, the requests it answers) and the hooks
it names. The byte-level work stays in the sans-I/O module of its API
(``gateway.interceptors.api_versions``, ``describe_cluster``, ``update_features``) or in
the shared address helpers (``gateway.interceptors.endpoints``).
"""
