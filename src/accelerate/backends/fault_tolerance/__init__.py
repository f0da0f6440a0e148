"""Fault-tolerant replica groups on torchft (our addition; see docs/how-to/fault-tolerance.md).

Opt in with ``FaultToleranceKwargs`` or ``accelerate launch --fault_tolerance``; torchft is imported
only when a run uses it. ``strategy.py`` wires the five-line loop, ``runtime.py`` holds the step
protocol, ``loader.py`` the committed-position data, ``manager.py`` torchft's manager and lighthouse
bound to the user's address, ``transport.py`` / ``wire.py`` healing as tensors (no pickle),
``shards.py`` FSDP2 inside a group (gradient shards exchanged and healed per rank).
"""
