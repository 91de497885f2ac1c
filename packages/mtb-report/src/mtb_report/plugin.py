"""The ``report`` plugin (entry point ``mtb = report``).

It implements no hooks yet. Its issue adds:

- ``mtb_register_reporters``: ``markdown``, ``csv`` and ``html`` reporters
  over result documents;
- ``mtb_register_commands``: ``mtb report ...`` (tables and plots from
  result files, the evidence manifest).

Reports read JSON result files only; nothing here imports torch.
"""
