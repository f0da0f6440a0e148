"""Communication between the processes of a run: the communicator and everything built on it.

- :mod:`~accelerate.collectives.communicator`: :class:`Communicator`, this process's view of its
  group (size, rank, where buffers live, debug settings) and its four primitives; ``PartialState``
  binds one, and every caller asks :func:`current_communicator` instead of ``torch.distributed``.
- :mod:`~accelerate.collectives.operations`: gather, broadcast, reduce, pad on nested structures
  (upstream's ``accelerate.utils.gather`` and friends).
- :mod:`~accelerate.collectives.checks`: debug mode's check before each collective (every process
  arrived, with matching shapes), through the process group's store.
- :mod:`~accelerate.collectives.agreement`: one process's failure raised on every process.
- :mod:`~accelerate.collectives.owned_tensor`: a tensor only one process holds, sent to all.
- :mod:`~accelerate.collectives.rng`: seeding per process and RNG synchronisation from process 0.

Layering (imports point down): ``state`` > ``collectives`` > ``config`` > ``diagnostics`` > ``utils``.
The process state binds the communicator and waits in these collectives, so this package sits below
``state/`` and never imports it; it reads the launcher's debug settings (``config.env``) for a
script that made its own process group, and reports each collective to the hang watchdog's slot
(``diagnostics``). Upstream's paths (``accelerate.utils.operations``, ``accelerate.utils.random``,
``accelerate.utils.gather``...) re-export from here lazily.
"""
