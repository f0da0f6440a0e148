"""Hang diagnosis: where every process is when the processes stop meeting in collectives.

- :mod:`~accelerate.diagnostics.watchdog`: the collective slot (:data:`SLOT`, which every
  accelerate collective and optimizer step writes to) and the per-process watchdog thread that
  notices a collective that never completes, writes a report and ends the process.
- :mod:`~accelerate.diagnostics.rank_report`: one process's report (its stacks, the collective it
  is in, its step), written as a file the launcher (:mod:`accelerate.launch.hang_report`) summarises.

Layering: this package sits just above ``utils/`` and imports nothing else of accelerate, so the
collectives (:mod:`accelerate.collectives`), the process state and the optimizer can all report
into the slot. It communicates only through the process group's key-value store, never through a
collective, because a collective would itself hang on the missing process.
"""
