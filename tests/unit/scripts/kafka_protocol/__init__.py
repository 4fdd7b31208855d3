"""Tests of scripts/kafka_protocol, the generator of the protocol data."""
