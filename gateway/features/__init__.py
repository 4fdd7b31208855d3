"""Cluster-wide feature gating (KIP-584): catalogue, ZooKeeper layout, validation."""
