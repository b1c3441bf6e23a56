"""Test support shipped with adk-memory: the store conformance suite, server fixtures, model doubles."""
