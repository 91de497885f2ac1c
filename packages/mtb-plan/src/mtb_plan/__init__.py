"""mtb-plan: predict the step time and memory of every parallel layout, then verify by running.

A device profile (``mtb plan calibrate``) holds what was measured on a machine:
operator throughput at the workload's shapes and collective curves from
``mtb comm`` result documents. The step model turns a workload, a world size
and a profile into a ranked table of layouts; ``mtb plan --verify K`` runs
some of them through the matrix runner and reports the model's own error.
"""

__version__ = "0.2.0"
