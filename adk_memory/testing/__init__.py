"""Test support shipped with adk-memory: conformance suite, server fixtures, model doubles."""
