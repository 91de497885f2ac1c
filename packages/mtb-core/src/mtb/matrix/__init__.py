"""Experiment matrices: declarative sweeps of mtb commands, one isolated process per cell.

``spec`` reads a matrix file, ``cells`` expands it, ``plan`` decides what
this machine can run, ``runner`` runs one cell under a timeout, ``records``
turns outcomes into the matrix document, ``session`` drives a whole matrix
with resume and progress.
"""
