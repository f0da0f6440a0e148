"""Scripts to run under ``accelerate launch`` (any number of processes): each has a ``main()``.

``test_script`` is the self-check ``accelerate test`` runs; ``test_ops`` checks the collectives;
``test_sync`` checks gradient synchronisation (``no_sync``, ``accumulate``). Find their paths with
``path_in_accelerate_package("test_utils", "scripts", "test_ops.py")``.
"""
