"""Slurm as mtb's cluster executor: Slurm's own commands submit, watch and cancel the jobs.

:mod:`~mtb.slurm.scheduler` wraps ``sbatch``/``scontrol``/``sacct``/``scancel``,
:mod:`~mtb.slurm.settings` holds a job's resources, :mod:`~mtb.slurm.script`
writes the batch script that both ``mtb slurm script`` prints and the matrix
executor (:mod:`mtb.matrix.slurm_session`) submits.
"""
