"""Know before you launch: the per-rank memory of a training layout, and a check of the layout's set-up.

* :func:`~accelerate.planning.shapes.load_model_shape` reads a model offline (config.json,
  safetensors header, or a meta-device ``module:function``);
* :func:`~accelerate.planning.estimate.estimate_memory` sizes each rank's parameters, gradients,
  optimizer states, activations and communication buffers for a :class:`RunLayout`;
* :func:`~accelerate.planning.search.layouts_that_fit` lists the layouts of a world size that fit;
* :func:`~accelerate.planning.check.check_plan` runs every rank's real set-up (device mesh, data
  sharding) against torch's fake process group, for world sizes this machine lacks.

Everything but the plan checker and ``shape_of_module`` is pure Python (``accelerate estimate-memory``
imports it without torch).
"""

from __future__ import annotations

from accelerate.planning.estimate import MemoryEstimate, RankGroup, RankMemory, estimate_memory
from accelerate.planning.layout import RunLayout, parse_memory
from accelerate.planning.search import layouts_that_fit
from accelerate.planning.shapes import ModelShape, ModelShapeError, load_model_shape

__all__ = [
    "MemoryEstimate",
    "ModelShape",
    "ModelShapeError",
    "RankGroup",
    "RankMemory",
    "RunLayout",
    "estimate_memory",
    "layouts_that_fit",
    "load_model_shape",
    "parse_memory",
]
