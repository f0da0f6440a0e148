"""Per-process random number generator state (``random_states_{rank}.pkl``).

The file is a ``torch.save`` of a dict with the keys upstream Accelerate uses (``step``,
``random_state``, ``numpy_random_seed``, ``torch_manual_seed``, ``torch_cuda_manual_seed``), so runs
resume across the two libraries. We store NumPy's state with its key array as a list of ints, which
``torch.load(weights_only=True)`` reads with no pickle code at all. Files written by upstream hold a
real ``numpy.ndarray``; for those we allow exactly NumPy's array reconstructor, ``ndarray`` and the
dtypes involved, still under the restricted unpickler (nothing else in the file can run).
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accelerate.diagnostics.watchdog import SLOT
from accelerate.storage.errors import CheckpointError
from accelerate.storage.regular_files import open_regular

RNG_STATE_NAME = "random_states"
# Our files carry this key (upstream ignores unknown keys): a folder holding such a file but no
# manifest is one of ours whose manifest is gone, so it is refused rather than loaded unverified.
OWN_MARKER = "accelerate_manifest"


def rng_file_name(process_index: int) -> str:
    return f"{RNG_STATE_NAME}_{process_index}.pkl"


def _sampler_generator(dataloader: Any) -> torch.Generator | None:
    """The ``torch.Generator`` driving a dataloader's shuffling, if one can be found."""
    for holder in (
        getattr(dataloader, "sampler", None),
        getattr(getattr(dataloader, "batch_sampler", None), "sampler", None),
        dataloader,
    ):
        generator = getattr(holder, "generator", None)
        if isinstance(generator, torch.Generator):
            return generator
    return None


# Key of the accumulated, not yet applied gradients in a random-states file (upstream ignores it).
PENDING_GRADIENTS = "accelerate_pending_gradients"
# Key of the process's optimizer-step count (what a resumed run's "steps replayed" is measured from).
OPTIMIZER_STEPS = "accelerate_optimizer_steps"


def capture_rng_state(
    step: int,
    dataloaders: Sequence[Any] = (),
    pending_gradients: Sequence[dict[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """This process's generator states; dataloaders without ``state_dict`` contribute their sampler's.

    ``pending_gradients`` (one ``{parameter name: gradient}`` per model) are the gradients of an
    unfinished accumulation window: they are per process (DDP does not all-reduce them until the
    window's last micro-step), so they travel in this per-process file.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "step": step,
        "random_state": random.getstate(),
        "numpy_random_seed": (str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)),
        "torch_manual_seed": torch.get_rng_state(),
        OWN_MARKER: "accelerate_manifest.json",
        OPTIMIZER_STEPS: int(SLOT.step),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    generators = {}
    for i, loader in enumerate(dataloaders):
        if callable(getattr(loader, "state_dict", None)):
            continue  # the loader's own state (saved separately) covers its sampler
        generator = _sampler_generator(loader)
        if generator is not None:
            generators[i] = generator.get_state()
    if generators:
        state["accelerate_sampler_generators"] = generators
    if pending_gradients is not None:
        state[PENDING_GRADIENTS] = [dict(grads) for grads in pending_gradients]
    return state


def restore_rng_state(state: dict[str, Any], dataloaders: Sequence[Any] = ()) -> None:
    """Sets every generator captured by :func:`capture_rng_state` (or by upstream Accelerate)."""
    random.setstate(_as_tuple(state["random_state"]))
    np_state = state["numpy_random_seed"]
    np.random.set_state((np_state[0], np.asarray(np_state[1], dtype=np.uint32), *np_state[2:]))
    torch.set_rng_state(state["torch_manual_seed"])
    if OPTIMIZER_STEPS in state:
        SLOT.step = int(state[OPTIMIZER_STEPS])
    cuda = state.get("torch_cuda_manual_seed")
    if cuda is not None and torch.cuda.is_available():
        # A run resumed on fewer GPUs restores the ones it has.
        for device, gen_state in enumerate(list(cuda)[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(gen_state, device)
    for i, gen_state in (state.get("accelerate_sampler_generators") or {}).items():
        if int(i) < len(dataloaders):
            generator = _sampler_generator(dataloaders[int(i)])
            if generator is not None:
                generator.set_state(gen_state)


def check_rng_state(state: dict[str, Any], dataloaders: Sequence[Any] = (), *, source: str) -> None:
    """Raises unless :func:`restore_rng_state` will take ``state`` whole; changes no generator.

    Each state is set on a throwaway generator of the same kind, which runs exactly the checks the
    real one would, so a malformed entry is found before the first real generator is set.

    Raises:
        CheckpointError: naming ``source`` and the entry that cannot be restored.
    """
    entry = "random_state"
    try:
        random.Random().setstate(_as_tuple(state["random_state"]))
        entry = "numpy_random_seed"
        np_state = state["numpy_random_seed"]
        np.random.RandomState().set_state(
            (np_state[0], np.asarray(np_state[1], dtype=np.uint32), *np_state[2:])
        )
        entry = "torch_manual_seed"
        torch.Generator().set_state(state["torch_manual_seed"])
        entry = "torch_cuda_manual_seed"
        cuda = state.get("torch_cuda_manual_seed")
        if cuda is not None and not all(isinstance(s, torch.Tensor) for s in cuda):
            raise TypeError("not a list of generator states")
        entry = "accelerate_sampler_generators"
        for i, gen_state in (state.get("accelerate_sampler_generators") or {}).items():
            if int(i) < len(dataloaders):
                generator = _sampler_generator(dataloaders[int(i)])
                if generator is not None:
                    torch.Generator(device=generator.device).set_state(gen_state)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{source}: its {entry!r} cannot be restored ({exc!r}); nothing was loaded"
        ) from exc


def _as_tuple(value: Any) -> Any:
    # random.setstate needs tuples all the way down; a round trip through some formats yields lists.
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value


def numpy_safe_globals() -> list[Any]:
    """NumPy's array reconstructor, ``ndarray``, ``dtype`` and the dtype classes a random state uses."""
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy.core/_core.multiarray._reconstruct
    dtype_classes = {type(np.dtype(t)) for t in (np.uint32, np.uint8, np.int64, np.float64)}
    return [reconstruct, np.ndarray, np.dtype, *dtype_classes]


def load_rng_file(path: Path) -> dict[str, Any]:
    """Reads a random-states file safely (see the module docstring)."""
    try:
        with open_regular(path) as handle:  # a FIFO there is refused, never read (it would block)
            try:
                state = torch.load(handle, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError:
                # An upstream file: allow NumPy's array types only, still with the restricted unpickler.
                handle.seek(0)
                with torch.serialization.safe_globals(numpy_safe_globals()):
                    state = torch.load(handle, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path} holds objects other than generator states; refusing to unpickle them: {exc}"
        ) from exc
    except (RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(f"Cannot read {path}: {exc} (truncated or not a torch.save file?)") from exc
    if not isinstance(state, dict) or "random_state" not in state:
        raise CheckpointError(f"{path} is not a random-states file (no 'random_state' entry)")
    return state
