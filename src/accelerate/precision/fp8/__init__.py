"""fp8 training: torchao's float8 linears (CPU and GPU), Transformer Engine and MS-AMP (fp8 GPUs).

- ``recipes.py``: the settings objects (``AORecipeKwargs``, ``TERecipeKwargs``, ...), torch-free.
- ``resolve.py``: which library runs, from the Accelerator's handlers and the launcher's variables.
- ``ao.py``, ``te.py``, ``msamp.py``: each library's conversion; each imports its library on use only.
"""
