"""The model families: every preset builds, splits into stages that compose to the whole, counts FLOPs; tp plans."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import models
from models.data import RandomDataset, global_batches
from models.flops import train_flops_per_sample
from models.mlp import tp_plan as mlp_plan
from models.spec import ModelSpec, TensorParallelPlan
from strategies.partition import even_balance, split_sequential

FAMILIES = list(models.FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("preset", models.PRESETS)
def test_every_preset_builds_and_gives_logits_per_sample(family: str, preset: str) -> None:
    # The large presets are GPU-sized: build them on the meta device (shapes only).
    device = torch.device("meta" if preset == "large" else "cpu")
    with device:
        spec = models.build_model(family, preset)
    inputs, targets = spec.make_batch(2, torch.Generator().manual_seed(0))
    logits = spec.blocks(inputs.to(device))
    # One row of logits per target: per sample for the classifiers, per token for the transformer.
    assert logits.shape[:-1] == targets.shape and logits.shape[0] == 2
    assert int(targets.max()) < logits.shape[-1]
    assert len(spec.blocks) >= 4, "too few blocks to split over 4 stages"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_stages_compose_to_the_whole_model(family: str, stages: int) -> None:
    torch.manual_seed(0)
    spec = models.build_model(family, "tiny", norm="group")
    spec.blocks.eval()
    inputs, _ = spec.make_batch(4, torch.Generator().manual_seed(1))
    parts = split_sequential(spec.blocks, even_balance(len(spec.blocks), stages))
    x = inputs
    for part in parts:
        x = part(x)
    torch.testing.assert_close(x, spec.blocks(inputs), rtol=0, atol=0)


def test_cnn_norm_is_selectable() -> None:
    batch = models.build_model("cnn", "tiny", norm="batch").blocks
    group = models.build_model("cnn", "tiny", norm="group").blocks
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in batch.modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in group.modules())
    assert any(isinstance(m, torch.nn.GroupNorm) for m in group.modules())


def test_resnet_presets_are_the_torchvision_networks() -> None:
    from torchvision.models import resnet18, resnet50

    with torch.device("meta"):
        small = models.build_model("cnn", "small").blocks
        large = models.build_model("cnn", "large").blocks
        n18 = sum(p.numel() for p in resnet18(num_classes=10).parameters())
        n50 = sum(p.numel() for p in resnet50().parameters())
    assert sum(p.numel() for p in small.parameters()) == n18
    assert sum(p.numel() for p in large.parameters()) == n50
    assert len(large) == 1 + 16 + 1  # stem, 16 bottlenecks, head


def test_flops_per_sample_match_the_arithmetic_of_an_mlp() -> None:
    spec = models.build_model("mlp", "tiny")
    width, depth, classes = 32, 4, 10
    forward = 2 * (depth * width * width + width * classes)
    # Backward costs twice the forward, but the first layer needs no input gradient.
    backward = 2 * forward - 2 * width * width
    assert train_flops_per_sample(spec) == forward + backward


def test_flops_of_resnet50_are_about_three_times_its_forward() -> None:
    with torch.device("meta"):
        spec = models.build_model("cnn", "large")
    # ResNet-50 forward at 224 px is 4.1 GMACs = 8.2 GFLOPs; training is about 3x that.
    assert 23e9 < train_flops_per_sample(spec) < 26e9


def test_random_dataset_is_seeded_and_batches_wrap() -> None:
    spec = models.build_model("mlp", "tiny")
    a, b = RandomDataset(spec, 12, seed=3), RandomDataset(spec, 12, seed=3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, RandomDataset(spec, 12, seed=4).inputs)
    batches = list(global_batches(a, batch_size=8, steps=3))
    assert [len(t) for _, t in batches] == [8, 8, 8]
    torch.testing.assert_close(batches[1][0][4:], a.inputs[:4])  # step 1 covers samples 8..11, 0..3


def test_bring_your_own_model(tmp_path, monkeypatch) -> None:
    (tmp_path / "mymodel.py").write_text(
        "import torch\nfrom torch import nn\nfrom models import ModelSpec\n"
        "def build(preset='small'):\n"
        "    width = 6 if preset == 'tiny' else 12\n"
        "    blocks = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 3))\n"
        "    def make_batch(n, g):\n"
        "        return torch.randn(n, width, generator=g), torch.randint(3, (n,), generator=g)\n"
        "    return ModelSpec('mine', blocks, make_batch, nn.CrossEntropyLoss(), default_batch_size=4)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = models.build_model("mymodel:build", preset="tiny")
    assert spec.blocks[0].in_features == 6 and spec.default_batch_size == 4
    with pytest.raises(models.ModelImportError, match="has no function 'nope'"):
        models.build_model("mymodel:nope")
    with pytest.raises(models.ModelImportError, match="cannot import 'no_such_module_xyz'"):
        models.build_model("no_such_module_xyz:build")


# --- tensor-parallel plans: data only ------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_every_plan_names_linear_layers_of_the_blocks(family: str) -> None:
    spec = models.build_model(family, "tiny")
    if family in ("cnn", "rnn"):
        assert spec.tp_plan is None
        return
    modules = dict(spec.blocks.named_modules())
    assert spec.tp_plan is not None and len(spec.tp_plan.styles) > 0
    for path, style in spec.tp_plan.styles.items():
        assert isinstance(modules[path], nn.Linear), path
        assert style in ("colwise", "rowwise")
    # Column-wise and row-wise come in pairs: each sharded activation is gathered back by a row-wise layer.
    styles = list(spec.tp_plan.styles.values())
    assert styles.count("colwise") >= styles.count("rowwise") > 0


def test_tiny_mlp_plan_pairs_its_hidden_blocks_and_keeps_the_classifier_whole() -> None:
    plan = models.build_model("mlp", "tiny").tp_plan
    assert plan == TensorParallelPlan(
        {"0.0": "colwise", "1.0": "rowwise", "2.0": "colwise", "3.0": "rowwise"}, {"hidden width": 32}
    )
    # An odd depth leaves the last hidden block (and the classifier) replicated.
    assert mlp_plan(depth=3, width=8).styles == {"0.0": "colwise", "1.0": "rowwise"}
    assert mlp_plan(depth=1, width=8).styles == {}


@pytest.mark.parametrize(
    ("first", "count", "expected"),
    [
        (0, 5, {"0.0": "colwise", "1.0": "rowwise", "2.0": "colwise", "3.0": "rowwise"}),
        (0, 3, {"0.0": "colwise", "1.0": "rowwise"}),  # the pair (2, 3) is cut by the stage's edge: replicated
        (3, 2, {}),
        (2, 3, {"0.0": "colwise", "1.0": "rowwise"}),  # keyed by the stage's own block indices
    ],
)
def test_a_stage_keeps_the_plan_pairs_it_holds_whole(first: int, count: int, expected: dict[str, str]) -> None:
    assert mlp_plan(depth=4, width=32).local_styles(first, count) == expected


def test_a_transformer_stage_keeps_its_blocks_attention_and_mlp_pairs() -> None:
    plan = models.build_model("transformer", "tiny").tp_plan
    assert plan is not None
    local = plan.local_styles(2, 2)  # blocks 2 (the last decoder block) and 3 (the head)
    assert local == {"0.attn.q": "colwise", "0.attn.k": "colwise", "0.attn.v": "colwise", "0.attn.out": "rowwise",
                     "0.mlp.fc1": "colwise", "0.mlp.fc2": "rowwise"}


def test_plan_degree_must_divide_every_sharded_dimension() -> None:
    plan = TensorParallelPlan({}, {"attention heads": 4, "mlp hidden width": 1024})
    plan.check_degree(1)
    plan.check_degree(4)
    with pytest.raises(ValueError, match="tensor-parallel degree 8 does not divide attention heads 4$"):
        plan.check_degree(8)
    with pytest.raises(ValueError, match="degree 3 does not divide attention heads 4, mlp hidden width 1024$"):
        plan.check_degree(3)


@pytest.mark.parametrize(("styles", "message"), [
    ({"0.0": "colwise", "5.0": "rowwise"}, "tp_plan path '5.0' names nothing, not an nn.Linear"),
    ({"0": "colwise"}, "tp_plan path '0' names Sequential, not an nn.Linear"),
    ({"0.0": "sequence"}, "tp_plan style 'sequence' for '0.0'; choose from colwise, rowwise"),
])
def test_a_plan_that_does_not_fit_the_blocks_is_refused_when_the_spec_is_made(
    styles: dict[str, str], message: str
) -> None:
    spec = models.build_model("mlp", "tiny")
    with pytest.raises(ValueError, match=message):
        ModelSpec("mlp", spec.blocks, spec.make_batch, spec.loss_fn, 8, TensorParallelPlan(styles, {}))


def test_decoders_from_published_dimensions_have_the_published_parameter_counts_and_allocate_nothing() -> None:
    from models.decoder import DecoderDims, build_decoder

    llama = DecoderDims(32, 4096, 32, 8, 14336, "swiglu", "rms", "rope", 128256, 8192)
    mpt = DecoderDims(32, 4096, 32, 32, 16384, "gelu", "layer", "alibi", 50368, 2048)
    gpt = DecoderDims(2, 64, 4, 4, 256, "gelu", "layer", "learned", 100, 16)
    with torch.device("meta"):
        counts = [sum(p.numel() for p in build_decoder(d).parameters()) for d in (llama, mpt, gpt)]
        assert all(p.is_meta for p in build_decoder(llama).parameters())
    assert counts[0] == 8_030_261_248  # Llama 3.1 8B's 8.03 B (untied head)
    # MPT-7B: 6.65 B with its tied head; built untied here, so one more vocab x width matrix.
    assert counts[1] == 32 * (4 * 4096**2 + 2 * 4096 * 16384 + 2 * 4096) + 2 * 50368 * 4096 + 4096
    assert counts[2] == 2 * (4 * 64**2 + 2 * 64 * 256 + 2 * 64) + 2 * 100 * 64 + 16 * 64 + 64


def test_a_decoder_whose_heads_do_not_divide_is_refused_with_the_numbers() -> None:
    from models.decoder import DecoderDims

    with pytest.raises(ValueError, match="32 heads do not divide into 6 kv heads"):
        DecoderDims(2, 64, 32, 6, 256, "gelu", "layer", "learned", 100, 16)


def test_resnets_and_resnexts_from_published_dimensions_match_torchvisions_counts() -> None:
    from models.cnn import build_resnet

    with torch.device("meta"):
        resnet50 = sum(p.numel() for p in build_resnet("bottleneck", (3, 4, 6, 3)).parameters())
        resnext50 = sum(p.numel() for p in build_resnet("bottleneck", (3, 4, 6, 3), 32, 4).parameters())
        resnet18 = sum(p.numel() for p in build_resnet("basic", (2, 2, 2, 2)).parameters())
    # torchvision's model cards: 25,557,032; 25,028,904; 11,689,512.
    assert (resnet50, resnext50, resnet18) == (25_557_032, 25_028_904, 11_689_512)


def test_the_suites_presets_keep_their_documented_sizes() -> None:
    """Other strategies' tests depend on these presets bit for bit: the published-dimension builders are new
    functions beside them."""
    with torch.device("meta"):
        sizes = [sum(p.numel() for p in models.build_model("transformer", preset).blocks.parameters())
                 for preset in ("tiny", "small", "large")]
        resnet = sum(p.numel() for p in models.build_model("cnn", "large").blocks.parameters())
    assert sizes == [30_144, 3_701_248, 737_504_512] and resnet == 25_557_032
