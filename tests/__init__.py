"""Test suite of kafka-gateway (a package so ``tests.harness`` imports the same way everywhere)."""
