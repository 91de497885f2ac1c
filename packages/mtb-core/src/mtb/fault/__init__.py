"""Fault smokes: real multi-process runs broken on purpose, and checks of what must survive."""
