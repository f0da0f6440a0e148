"""FSDP1 -> FSDP2 config conversion (what ``accelerate to-fsdp2`` writes), upstream's rules.

``fsdp_sharding_strategy`` becomes ``fsdp_reshard_after_forward`` (FULL_SHARD -> true, SHARD_GRAD_OP ->
false), the keys FSDP2 has no use for are dropped (each one is named), and ``fsdp_version: 2`` is set.
Pure data, no torch: the CLI imports it.
"""

from __future__ import annotations

from typing import Any

# Keys FSDP2 does without: prefetching and parameter flattening are automatic, states start in sync.
_DROPPED = (
    "fsdp_backward_prefetch",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
    "fsdp_sync_module_states",
)
_RESHARD = {"FULL_SHARD": True, "1": True, "SHARD_GRAD_OP": False, "2": False}


def convert_fsdp_config(fsdp: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The FSDP2 form of an ``fsdp_config`` mapping, and one line per change."""
    out, changes = dict(fsdp), []
    if str(out.get("fsdp_version", 1)) == "2":
        return out, ["already fsdp_version: 2; nothing to change"]
    if "fsdp_sharding_strategy" in out:
        strategy = str(out.pop("fsdp_sharding_strategy")).upper()
        if strategy not in _RESHARD:
            raise ValueError(
                f"fsdp_sharding_strategy: {strategy} has no FSDP2 equivalent (FSDP2 always shards; "
                "FULL_SHARD or SHARD_GRAD_OP convert). Choose one of those first."
            )
        out["fsdp_reshard_after_forward"] = _RESHARD[strategy]
        changes.append(
            f"fsdp_sharding_strategy: {strategy} -> fsdp_reshard_after_forward: {_RESHARD[strategy]}"
        )
    for key in _DROPPED:
        if key in out:
            changes.append(f"removed {key}: {out.pop(key)!r} (FSDP2 does not use it)")
    out["fsdp_version"] = 2
    changes.append("fsdp_version: 2")
    return out, changes
