"""strategies/single.py: the reference places the whole model on one device, and its cost is every block in turn."""

from __future__ import annotations

import pytest

import models
from bench.predict.calibration import BlockCost, Line
from strategies import build_strategy
from strategies.cost_model import RuntimeOverheads, Scenario, StepPrediction
from strategies.errors import ConfigError
from strategies.options import ModelFacts, RunOptions
from strategies.single import SingleDevice, WholeModelCost


class Options:
    """The option groups of a run (``OptionSource``): single reads RunOptions alone."""

    def __init__(self, run: RunOptions) -> None:
        self.run = run

    def group(self, cls: type) -> object:
        assert cls is RunOptions, cls
        return self.run


def test_single_trains_the_models_own_blocks_on_one_device_and_refuses_more() -> None:
    strategy = build_strategy("single", Options(RunOptions(devices=1, batch_size=8, accelerator="cpu")))
    assert isinstance(strategy, SingleDevice) and strategy.is_reference and strategy.max_devices == 1
    spec = models.build_model("mlp", "tiny")
    assert strategy.prepare(spec, strategy.local_topology()) is spec.blocks  # no wrapper: the reference itself
    with pytest.raises(ConfigError, match=r"^strategy 'single' runs on exactly 1 device, got --devices 2$"):
        SingleDevice(RunOptions(devices=2, batch_size=8, accelerator="cpu")).validate(ModelFacts(blocks=5, gpus=0))


class Costs:
    """A cost source with round numbers: 0.5 ms of overhead a pass, an update of 0.1 ms per parameter."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def blocks(self, threads: int) -> list[BlockCost]:
        self.asked.append(threads)
        return [BlockCost(Line(0.0, 1.0), Line(0.0, 2.0), 10, 0.0, 3.0),
                BlockCost(Line(0.0, 2.0), Line(0.0, 4.0), 20, 0.0, 5.0)]

    def overhead_ms(self, threads: int, samples: float) -> float:
        return 0.5

    def optimizer_ms(self, threads: int, parameters: float) -> float:
        return parameters / 10

    def runtime_for(self, ranks: int, global_batch: float | None = None) -> RuntimeOverheads:
        return RuntimeOverheads()


def test_the_whole_models_step_is_every_blocks_forward_and_backward_then_the_update() -> None:
    costs = Costs()
    step = WholeModelCost().step(costs, Scenario("single", 1, 4, threads=2), 1)  # type: ignore[arg-type]
    # forward (1 + 2) x 4 samples = 12, backward (2 + 4) x 4 = 24, overhead 0.5; update 30 parameters / 10
    assert step == StepPrediction(step_ms=36.5 + 3.0, compute_ms=36.5, exposed_comm_ms=0.0, update_ms=3.0)
    assert costs.asked == [2]  # the scenario's threads


def test_the_whole_model_holds_every_parameter_gradient_and_state_and_the_whole_batchs_activations() -> None:
    blocks = Costs().blocks(1)
    memory = WholeModelCost().memory(blocks, Scenario("single", 1, 4), 2)  # type: ignore[arg-type]
    # 30 parameters: 120 bytes each of parameters and gradients, 2 states per parameter (Adam) 240; (3 + 5) x 4 saved.
    # The peak: the first block's backward, every gradient made and its own 3 x 4 bytes of activations still held.
    assert memory == {"parameters": 120, "gradients": 120, "optimizer_state": 240, "activations": 32,
                      "total": 120 + 240 + 120 + 12}
