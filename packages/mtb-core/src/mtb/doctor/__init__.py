"""``mtb doctor``: what this machine and its network offer a distributed run, checked.

Each module gathers one area (software, hardware, network, variables,
connectivity) into :class:`mtb.doctor.check.Check` records; ``document``
turns them into the JSON result and the table.
"""
