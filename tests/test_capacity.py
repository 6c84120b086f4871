"""The largest preset each strategy fits: an extrapolation from measured bytes, checked on known arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.capacity import largest_presets, preset_sizes
from reports.load import load
from reports.scaling import with_scaling
from tests.helpers.records import record, tracked

MIB = 2**20


def _runs(tmp_path: Path, *records: dict) -> object:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return with_scaling(load([path]).runs)[0]


def _on(device_gib: float, strategy: str, devices: int, memory: list[dict]) -> dict:
    r = record(strategy, devices, 100.0, memory_by_kind=memory)
    r["env"]["device_memory_bytes"] = int(device_gib * 2**30)
    return r


def test_the_meta_count_knows_each_preset_and_leaves_saved_weights_out() -> None:
    params, saved = preset_sizes("mlp", "tiny")
    assert params == 4554  # the preset's parameter count, as models/mlp.py builds it
    # A Linear saves its weight for the input's gradient: counted as activations, the small model's
    # saved bytes per sample would be at least its 4-byte weights.
    small_params, small_saved = preset_sizes("mlp", "small")
    assert 0 < saved < small_saved < 4 * small_params


def test_the_measured_preset_is_predicted_as_measured_and_the_largest_that_fits_is_named(tmp_path: Path) -> None:
    params, _ = preset_sizes("mlp", "small")
    state_mib = 4 * params / MIB  # fp32 SGD with momentum: parameters = gradients = state = 4 bytes each
    single = _on(4.0, "single", 1, tracked(state_mib, state_mib, state_mib, 3 * state_mib + 10))
    (row,) = largest_presets(_runs(tmp_path, single)).to_dict("records")
    assert row["state bytes per parameter"] == pytest.approx(12.0)
    assert row["small MiB (extrapolated)"] == pytest.approx(3 * state_mib + 10, rel=5e-3)  # 3 significant figures
    # mlp large: 814M parameters x 12 bytes is about 9 GiB, more than the 4 GiB device.
    assert row["largest preset that fits (extrapolated)"] == "small"
    assert row["large MiB (extrapolated)"] > 9 * 1024


def test_sharding_moves_the_largest_preset_up_where_it_divides_the_state(tmp_path: Path) -> None:
    params, _ = preset_sizes("mlp", "small")
    whole = 4 * params / MIB
    # 12 GiB per device (host of 24 GiB shared by 2 emulated devices): ddp's 12 bytes per parameter of
    # mlp large (~9.1 GiB) fit, as do fsdp's 6; on a 16 GiB host (8 per device) only fsdp's fit.
    for host, ddp_fits in ((24.0, "large"), (16.0, "small")):
        ddp = _on(host, "ddp", 2, tracked(whole, whole, whole, 3 * whole + 1))
        fsdp = _on(host, "fsdp", 2, tracked(whole / 2, whole / 2, whole / 2, 1.5 * whole + 1))
        rows = largest_presets(_runs(tmp_path, ddp, fsdp))
        by_strategy = dict(zip([v.split()[0] for v in rows["variant"]], rows.to_dict("records"), strict=True))
        assert by_strategy["fsdp"]["state bytes per parameter"] == pytest.approx(6.0)
        assert by_strategy["ddp"]["largest preset that fits (extrapolated)"] == ddp_fits
        assert by_strategy["fsdp"]["largest preset that fits (extrapolated)"] == "large"


def test_records_without_tracked_memory_or_device_memory_give_no_rows(tmp_path: Path) -> None:
    assert largest_presets(_runs(tmp_path, record("single", 1, 100.0))).empty
