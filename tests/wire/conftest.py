"""Shared helpers for the wire tests."""
