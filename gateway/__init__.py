"""kafka-gateway: a Kafka protocol gateway with cluster-wide feature gating."""

__version__ = "0.1.0"
