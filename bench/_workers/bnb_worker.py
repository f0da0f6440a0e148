"""The quantized-loading benchmark's process: one checkpoint loaded in 8-bit and in 4-bit (nf4), two ways.

Pairs (alternating, one torch thread; DIR/rank0.json holds seconds per repeat, wall time):
- ``raw``: bitsandbytes' own recipe: build the model with its layers (``Linear8bitLt`` /
  ``Linear4bit``) in memory, ``load_state_dict`` of the safetensors file read with ``load_file``,
  then ``.to("cpu")``, which quantizes.
- ``accel``: the model built under ``init_empty_weights``, then ``load_and_quantize_model`` with the
  checkpoint folder (each weight quantized as it is loaded).
Both leave the output head unquantized (ours does by default) and end with one forward.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from accelerate import init_empty_weights  # noqa: E402
from accelerate.utils import BnbQuantizationConfig  # noqa: E402
from accelerate.utils.bnb import load_and_quantize_model  # noqa: E402

DIM, HIDDEN, BLOCKS, OUT = 1024, 4096, 2, 256


def build(linear: Callable[[int, int], nn.Module] = nn.Linear) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(BLOCKS):
        layers += [linear(DIM, HIDDEN), nn.ReLU(), linear(HIDDEN, DIM), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(DIM, OUT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", default="0")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import bitsandbytes as bnb

    settings = {
        "8bit": (
            BnbQuantizationConfig(load_in_8bit=True),
            lambda i, o: bnb.nn.Linear8bitLt(i, o, has_fp16_weights=False, threshold=6.0),
        ),
        "4bit": (
            BnbQuantizationConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="fp32"
            ),
            lambda i, o: bnb.nn.Linear4bit(
                i, o, compute_dtype=torch.float32, compress_statistics=False, quant_type="nf4"
            ),
        ),
    }
    x = torch.randn(4, DIM)
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        torch.manual_seed(0)
        save_file(build().state_dict(), str(folder / "model.safetensors"))
        result["model_bytes"] = (folder / "model.safetensors").stat().st_size
        for name, (config, layer) in settings.items():

            def raw_model(layer: Callable[[int, int], nn.Module] = layer) -> nn.Module:
                model = build(layer)
                model.load_state_dict(load_file(str(folder / "model.safetensors")))
                return model.to("cpu")

            def accel_model(config: BnbQuantizationConfig = config) -> nn.Module:
                with init_empty_weights():
                    model = build()
                return load_and_quantize_model(model, config, weights_location=folder)

            def raw(make: Callable[[], nn.Module] = raw_model) -> torch.Tensor:
                return make()(x)

            def accel(make: Callable[[], nn.Module] = accel_model) -> torch.Tensor:
                return make()(x)

            # The same quantized model both ways (every stored tensor equal), checked before timing.
            ours, theirs = accel_model().state_dict(), raw_model().state_dict()
            assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
            times: dict[str, list[float]] = {"raw": [], "accel": []}
            for _ in range(5):
                for side, run in (("raw", raw), ("accel", accel)):
                    start = time.perf_counter()
                    with torch.no_grad():
                        run()
                    times[side].append(time.perf_counter() - start)
            result[name] = times
    Path(args.out, "rank0.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
