"""Strategies that ship with mtb-core."""
