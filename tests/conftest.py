"""Shared pytest configuration. Fixtures that open real servers live beside their tests."""
