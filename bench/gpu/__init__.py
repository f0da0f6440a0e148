"""``make gpu-check``: the CUDA test areas and the GPU benchmark, run in one call on a lent GPU machine.

``check.py`` runs everything and prints one summary; ``plan.py`` says what runs; ``report.py`` reads
the pytest junit files and formats the summary; ``measure.py`` is the benchmark core (ours or the
installed upstream, one side per subprocess, also runnable on CPU with ``--device cpu --tiny``).
"""
