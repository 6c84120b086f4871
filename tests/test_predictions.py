"""reports/predictions.py: the predictions' errors, winners and interval coverage as the report reads them."""

from __future__ import annotations

import pytest


def test_the_predicted_winner_agrees_with_any_measured_winner_whatever_commas_their_labels_carry() -> None:
    import pandas as pd

    from reports.predictions import ranking

    runs = pd.DataFrame({"panel": "p", "devices": 4, "global_batch": 16,
                         "variant": ["pp (gpipe, m=4)", "ddp", "mp (m=4)"],
                         "predicted_step_time_ms": [1.0, 2.0, 3.0], "step_time_ms": [1.1, 1.0, 3.0]})

    def agrees(winners: tuple[str, ...]) -> bool:
        fastest = pd.DataFrame([{"panel": "p", "devices": 4, "global_batch": 16, "fastest": ", ".join(winners),
                                 "winners": winners}])
        (row,) = ranking(runs, fastest).to_dict("records")
        return row["agrees"]

    # pp's label once split at its own comma, and pp lost a panel it shared the lead of.
    assert agrees(("ddp", "pp (gpipe, m=4)")) is True
    assert agrees(("ddp",)) is False


def test_the_report_sums_up_the_errors_per_device_count_and_over_all() -> None:
    import pandas as pd

    from reports.predictions import error_by_devices, prediction_errors

    runs = pd.DataFrame({
        "panel": ["mlp"] * 4, "devices": [2, 2, 4, 4], "variant": ["ddp", "pp", "ddp", "pp"],
        "global_batch": [64] * 4, "step_time_ms": [100.0, 100.0, 200.0, 100.0],
        "predicted_step_time_ms": [110.0, 95.0, 140.0, 100.0], "emulated": [True] * 4})
    table = error_by_devices(prediction_errors(runs)).set_index("devices")
    assert set(table["timings"]) == {"unknown"}  # the runs do not say whether they were fitted
    assert table.loc["2", "median |error|"] == pytest.approx(0.075)
    assert table.loc["2", "max |error|"] == pytest.approx(0.1)
    assert table.loc["4", "max |error|"] == pytest.approx(0.3)  # 140 predicted for 200 measured: -30%
    assert table.loc["all", "configurations"] == 4 and table.loc["all", "median |error|"] == pytest.approx(0.075)


def test_the_report_reads_each_error_against_the_repeats_own_stray() -> None:
    import pandas as pd

    from reports.predictions import error_by_devices, prediction_errors

    runs = pd.DataFrame({
        "panel": ["mlp"] * 2, "devices": [2, 2], "variant": ["ddp", "pp"], "global_batch": [64] * 2,
        "step_time_ms": [100.0, 100.0], "step_time_ms_min": [80.0, 98.0], "step_time_ms_max": [130.0, 101.0],
        "predicted_step_time_ms": [120.0, 95.0], "emulated": [True] * 2})
    errors = prediction_errors(runs).set_index("variant")
    assert errors.loc["ddp", "repeats stray"] == pytest.approx(0.3)  # the 130 ms repeat
    assert errors.loc["ddp", "within repeats"] and not errors.loc["pp", "within repeats"]  # 95 is below 98
    assert errors.loc["pp", "repeats stray"] == pytest.approx(0.02)
    summary = error_by_devices(prediction_errors(runs)).set_index("devices")
    assert summary.loc["2", "within repeats"] == "1 of 2"
    assert summary.loc["2", "median repeats stray"] == pytest.approx(0.16)


def test_the_report_headlines_the_held_out_errors_and_shows_the_fitted_apart() -> None:
    import pandas as pd

    from reports.predictions import error_by_devices, error_by_strategy, prediction_errors

    runs = pd.DataFrame({
        "panel": ["mlp"] * 3, "devices": [2, 2, 2], "variant": ["ddp", "pp", "tp"], "strategy": ["ddp", "pp", "tp"],
        "global_batch": [8, 64, 64], "step_time_ms": [100.0] * 3, "predicted_step_time_ms": [100.0, 110.0, 130.0],
        "prediction_fitted": [True, False, False], "emulated": [True] * 3})
    errors = prediction_errors(runs)
    assert list(errors["timings"]) == ["fitted", "held out", "held out"]
    table = error_by_devices(errors).set_index(["timings", "devices"])
    assert table.loc[("held out", "all"), "median |error|"] == pytest.approx(0.2)  # not 0.1 with the fitted ddp
    assert table.loc[("fitted", "all"), "configurations"] == 1
    assert set(error_by_strategy(errors, runs)["strategy"]) == {"pp", "tp"}


def test_the_report_counts_the_measured_medians_inside_their_predicted_intervals() -> None:
    import pandas as pd

    from reports.predictions import error_by_devices, prediction_errors

    runs = pd.DataFrame({
        "panel": ["mlp"] * 3, "devices": [2] * 3, "variant": ["ddp", "pp", "tp"], "global_batch": [64] * 3,
        "step_time_ms": [100.0] * 3, "predicted_step_time_ms": [95.0, 120.0, 104.0],
        "predicted_step_time_ms_interval": [[90.0, 100.0], [110.0, 130.0], None], "emulated": [True] * 3})
    errors = prediction_errors(runs)
    assert list(errors["runs with interval"]) == [1, 1, 0]  # tp's prediction carried none
    assert list(errors["runs inside"]) == [1, 0, 0]
    summary = error_by_devices(errors).set_index("devices")
    assert summary.loc["all", "runs inside predicted interval"] == "1 of 2"


def test_coverage_counts_each_run_against_the_interval_predicted_for_it_not_the_first_repeats() -> None:
    import pandas as pd

    from reports.predictions import error_by_devices, prediction_errors
    from reports.scaling import combine

    # a sweep's three repeats of one configuration: the first interval (the spread alone) misses its run, the
    # later two, widened by the errors measured before them, hold theirs; the first repeat's interval against
    # the median would have said 0 of 1
    runs = pd.DataFrame({
        "config_key": ["k"] * 3, "panel": "mlp", "devices": 2, "variant": "ddp", "global_batch": 64,
        "step_time_ms": [130.0, 120.0, 110.0], "samples_per_s": [1.0, 1.0, 1.0],
        "peak_mem_mib_per_device": [1.0] * 3, "disturbed": False, "profiled": False, "emulated": True,
        "predicted_step_time_ms": [100.0] * 3,
        "predicted_step_time_ms_interval": [[98.0, 102.0], [80.0, 125.0], [75.0, 133.0]]})
    errors = prediction_errors(combine(runs))
    assert (errors["runs with interval"].item(), errors["runs inside"].item()) == (3, 2)
    assert errors["predicted interval ms"].item() == "75-133"  # the last run's
    assert error_by_devices(errors).set_index("devices").loc["all", "runs inside predicted interval"] == "2 of 3"


def test_the_pipeline_account_says_whether_its_full_prediction_lands_inside_the_measured_interval() -> None:
    import pandas as pd

    from reports.predictions import SIDES, pipeline_gap_table

    steps = [{"added": "nothing", "predicted_speedup": 1.6, "predicted_share_of_ideal": 1.0},
             {"added": "the runtimes", "predicted_speedup": 1.31, "predicted_share_of_ideal": 0.82,
              "predicted_pp_ms": 150.0, "predicted_mp_ms": 196.5}]

    def measured_row(interval: list[float] | None) -> pd.Series:
        fidelity = pd.DataFrame([{"comparison": "pp-vs-mp", "held_to_target": True, "name": "pp vs mp",
                                  "predicted_steps": steps, "share_of_ideal": 0.88, "suite_ms": 160.0,
                                  "baseline_ms": 196.5 / 0.98, "share_of_ideal_interval": interval}])
        table = pipeline_gap_table(fidelity)
        return table[table["counting also"] == "measured"].iloc[0]

    def landed(interval: list[float] | None) -> str:
        measured = measured_row(interval)
        return f"{measured['share of ideal']} | {measured['account lands']}"

    # which side the account misses on: pp's full prediction 150 ms against its measured 160, mp's 2% short
    assert measured_row([0.84, 0.89])[SIDES] == "pp -6.2%, mp -2.0%"
    steps[-1] = {k: v for k, v in steps[-1].items() if not k.endswith("_ms")}  # a record from before they were kept
    assert measured_row([0.84, 0.89])[SIDES] == ""

    assert landed([0.84, 0.89]) == "88% [84%, 89%] | outside: 82.0%, 2.0 point(s) below it"
    assert landed([0.80, 0.89]) == "88% [80%, 89%] | inside the measured interval"
    assert landed([0.70, 0.80]).endswith("outside: 82.0%, 2.0 point(s) above it")
    assert landed(None) == "88% | - (one round: no interval)"
