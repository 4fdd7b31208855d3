"""One module per bridged API, each declaring its ``Conversion`` once as ``CONVERSION``.

``gateway.bridge.convert`` reads every module here that does not start with ``_``, and
``gateway.bridge.plan`` bridges exactly their APIs (the client APIs Kafka 4.0 removed
versions of, KIP-896; no client sends the inter-broker ones). A module whose API
converts field by field and nothing more declares only its name.
"""
