"""Expert parallelism (ep) on gloo CPU processes: tiny MoE models train to the one-process parameters."""

from __future__ import annotations

import pytest
import torch

from tests.backends.parallel import ep_workers as w
from tests.conftest import get_pool


# Our own experts module (top-2), the same with every token sent to expert 0 (rank 1's experts get no
# token at all), and transformers' Qwen3-MoE built from a config.
@pytest.mark.parametrize("kind", ["own", "skewed", "qwen3_moe"])
def test_ep2_trains_to_the_one_process_parameters(kind: str) -> None:
    results = get_pool(2).run(w.train, {"ep_size": 2}, kind, timeout=300)
    expected, norms = w.reference(kind, 2)
    for result in results:
        assert result["norms"] == pytest.approx(norms, rel=1e-5)
        assert result["local_experts"] == [(w.EXPERTS // 2, *result["local_experts"][0][1:])] * 2  # half each
    if kind == "skewed":  # uneven load: rank 0 holds expert 0 and gets every token, rank 1 none
        # two layers, two ranks' tokens each
        assert sum(results[0]["received"]) == 2 * w.STEPS * w.ACCUM * 2 * w.PER_RANK * w.SEQ
        assert set(results[1]["received"]) == {0}
    assert "experts split over ep=2" in results[0]["describe"]
    for key, value in expected.items():
        torch.testing.assert_close(results[0]["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)
