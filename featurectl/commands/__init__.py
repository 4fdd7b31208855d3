"""featurectl's command families, one module each: its parser (arguments, help text)
and its handler. ``featurectl.cli`` builds the top-level parser from them.

* ``describe``: supported and finalized levels, the live gateways.
* ``update``: finalize (upgrade), downgrade, disable (``update_options``: their parsers).
* ``releases``: version-mapping and feature-dependencies (Apache Kafka's tables).
* ``software``: brokers, the broker software behind each gateway (KIP-885).
"""
