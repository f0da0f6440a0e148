"""`accelerate test` runs the bundled self-check through the launcher and gives a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.helpers import reserved_port, run_cli


# The 2-process run compares training with a 1-process reference (full precision only); the
# 1-process run covers mixed precision.
@pytest.mark.parametrize(("processes", "precision"), [(1, "bf16"), (2, "no")])
def test_self_check_passes(tmp_path: Path, processes: int, precision: str) -> None:
    config = tmp_path / "config.yaml"
    with reserved_port() as port:  # held until the run ends, so no other process can take it
        config.write_text(
            f"compute_environment: LOCAL_MACHINE\ndistributed_type: {'MULTI_CPU' if processes > 1 else 'NO'}\n"
            f"num_processes: {processes}\nuse_cpu: true\nmixed_precision: '{precision}'\n"
            + (f"main_process_port: {port}\n" if processes > 1 else "")
        )
        result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
    out = result.stdout
    # Every check reports, whatever happened to the ones before it.
    for name in ("processes and ranks", "device", "collectives", "dataloader sharding", "training matches",
                 "mixed precision", "save_state / load_state"):  # fmt: skip
        assert name in out, out + result.stderr
    assert f"{processes} process(es)" in out
    assert "VERDICT: all checks passed." in out, out + result.stderr
    if precision != "no":
        assert "autocast computes in torch.bfloat16" in out  # the check ran, not skipped
    assert result.returncode == 0
