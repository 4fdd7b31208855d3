"""Tests of scripts/."""
