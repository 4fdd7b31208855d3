"""featurectl: operate cluster-wide finalized feature levels (KIP-584) for kafka-gateway."""
