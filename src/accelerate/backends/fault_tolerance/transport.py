"""Healing over the replica process group: the live state sent as tensors, described in JSON.

torchft's ``PGTransport`` unpickles the description it receives and its default ``HTTPTransport``
serves pickles on every interface; this transport is torchft's ``CheckpointTransport`` interface
with ``wire.py``'s format instead: a length, the JSON header (bytes in a uint8 tensor), then each
tensor's bytes, all by point-to-point sends on the same gloo group the gradients use. Nothing is
listening besides that group, and nothing received is executed.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import torch
from torchft.checkpointing.transport import CheckpointTransport

from accelerate.backends.fault_tolerance import wire

logger = logging.getLogger(__name__)

_TAG_LENGTH, _TAG_HEADER, _TAG_FIRST_TENSOR = 1, 2, 3


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 view (on CPU, where gloo sends from)."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


class TensorTransport(CheckpointTransport[Any]):  # type: ignore[misc]  # torchft ships no types
    """Sends and receives a healing state over ``pg`` (torchft's reconfigurable gloo group)."""

    def __init__(self, pg: Any, timeout: timedelta) -> None:
        self._pg = pg
        self._timeout = timeout
        self.last_receive_s: float | None = None  # how long the last healing took (the bench reads it)

    def metadata(self) -> str:
        return "accelerate-tensor-transport"

    def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: Any, timeout: timedelta) -> None:
        header, tensors = wire.encode({"step": step, "state": state_dict})
        length = torch.tensor([len(header)], dtype=torch.int64)
        header_t = torch.frombuffer(bytearray(header), dtype=torch.uint8)
        payloads = [_as_bytes(t) for t in tensors]
        works = []
        for dst in dst_ranks:
            works.append(self._pg.send([length], dst, tag=_TAG_LENGTH))
            works.append(self._pg.send([header_t], dst, tag=_TAG_HEADER))
            for i, payload in enumerate(payloads):
                if payload.numel() == 0:
                    continue  # nothing to send (the receiver knows the shape from the header)
                works.append(self._pg.send([payload], dst, tag=_TAG_FIRST_TENSOR + i))
        for work in works:
            work.wait(timeout)
        logger.info(
            "sent the live state of step %d (%d tensors) to replica ranks %s", step, len(payloads), dst_ranks
        )

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
        started = time.perf_counter()
        length = torch.zeros(1, dtype=torch.int64)
        self._pg.recv([length], src_rank, tag=_TAG_LENGTH).wait(timeout)
        size = int(length.item())
        if not 0 < size <= wire.MAX_HEADER_BYTES:
            raise ValueError(f"healing peer {src_rank} announced a header of {size} bytes; refused.")
        header = torch.empty(size, dtype=torch.uint8)
        self._pg.recv([header], src_rank, tag=_TAG_HEADER).wait(timeout)
        tree, specs = wire.tensor_specs(header.numpy().tobytes())
        tensors: list[torch.Tensor] = []
        for i, (dtype, shape) in enumerate(specs):
            out = torch.empty(shape, dtype=dtype)
            if out.numel():
                self._pg.recv([_as_bytes(out)], src_rank, tag=_TAG_FIRST_TENSOR + i).wait(timeout)
            tensors.append(out)
        message = wire.decode(tree, tensors)
        if not isinstance(message, dict) or message.get("step") != step or "state" not in message:
            raise ValueError(f"healing peer {src_rank} sent the state of another step than {step}; refused.")
        self.last_receive_s = time.perf_counter() - started
        logger.info("healed from replica rank %d at step %d in %.3f s", src_rank, step, self.last_receive_s)
        return message["state"]
