"""Crash-safe files on disk: durable writes, verified reads, atomic folder commits, the project lock.

One job: put bytes on disk so that a crash, a full disk or a second job leaves either the old
files or the new ones, and read them back checked. It knows file formats (safetensors, state-dict
files and their shards) but nothing of models, optimizers or training; ``checkpointing/`` (the
training state) and ``big_modeling/`` (weights loaded into a model) both build on it.

Modules: ``durable_io`` (checksummed, fsynced writes), ``verified_read`` (size and checksum checked
reads), ``manifest`` and ``atomic`` (a folder committed all at once), ``entry_names`` and
``regular_files`` (names and files a manifest may point at), ``project_lock`` (one job per project
folder), ``safetensors_io`` / ``model_files`` (weight file formats), ``sizes``, ``errors``.
"""
