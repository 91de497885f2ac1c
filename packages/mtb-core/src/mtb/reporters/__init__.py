"""Reporters that ship with mtb-core."""
