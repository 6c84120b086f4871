"""The degrees of parallelism of a run, as one value: validated by arithmetic, rank <-> coordinates, the mesh.

Like torchtitan's ``ParallelDims``: each dimension is one field here, not loose functions in a strategy.
The heaviest traffic goes innermost, on the closest ranks (one node, its fast links):

    dims, outermost first   ("dp", "dp_shard", "pp", "tp")
    rank = ((replica * dp_shard + shard) * pp + stage) * tp + tp_rank

    tp        two all-reduces per block, forward and backward, on the critical path
    pp        two transfers per micro-batch at every stage boundary, on the critical path
    dp_shard  all-gathers and reduce-scatters of every block's parameters (FSDP), overlappable
    dp        one all-reduce of the gradients per step (replicas)

    --devices 4 --dp 2 --pp 2       rank = replica * pp + stage rank

                   stage rank 0      stage rank 1
    replica 0        rank 0   ---->   rank 1        pp sub-group {0, 1}
    replica 1        rank 2   ---->   rank 3        pp sub-group {2, 3}
                   dp {0, 2}         dp {1, 3}

torchtitan puts pp outermost instead, because beside FSDP and TP its data-parallel traffic dominates;
here pp sits inside dp_shard so that ``--dp 2 --pp 2`` keeps each pipeline on consecutive ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

DP, DP_SHARD, PP, TP = "dp", "dp_shard", "pp", "tp"
"""Each dimension's name: its flag (``--dp-shard``), its field in a configuration and a record, its mesh axis."""
DIMS = (DP, DP_SHARD, PP, TP)
"""The mesh's dimension names, outermost first (context and expert parallel would join here)."""
LAYOUT = "dp, dp_shard, pp, tp (tp innermost): rank = ((replica * dp_shard + shard) * pp + stage) * tp + tp_rank"


class MeshCoords(NamedTuple):
    """Where one rank sits on each dimension of the mesh."""

    replica: int
    shard: int
    stage: int
    tp_rank: int


@dataclass(frozen=True)
class MeshLayout:
    """``dp`` replicas x ``dp_shard`` FSDP shards x ``pp`` pipeline ranks x ``tp`` tensor-parallel ranks."""

    dp: int
    pp: int
    dp_shard: int = 1
    tp: int = 1

    @classmethod
    def for_devices(cls, devices: int, dp: int | None, pp: int | None, dp_shard: int | None = None,
                    tp: int | None = None) -> MeshLayout:
        """The degrees as given, the missing ones filled in so that their product is ``devices``.

        dp_shard and tp default to 1. Of dp and pp, a missing one is what the others leave; with
        neither given, pp = 2 when nothing else is given either (hybrid's historical dp x pp),
        else pp = 1. Raises ValueError showing the arithmetic when the product is not ``devices``."""
        dp_shard, tp = dp_shard or 1, tp or 1
        if dp is None and pp is None:
            pp = 2 if dp_shard == tp == 1 else 1
        rest = devices // max(1, dp_shard * tp)
        if pp is None:
            pp = max(1, rest // max(1, dp or 1))
        if dp is None:
            dp = max(1, rest // pp)
        layout = cls(dp=dp, pp=pp, dp_shard=dp_shard, tp=tp)
        if layout.devices != devices:
            raise ValueError(
                f"dp({dp}) * dp_shard({dp_shard}) * pp({pp}) * tp({tp}) = {layout.devices} != devices({devices}); "
                "choose --dp, --dp-shard, --pp, --tp whose product is --devices"
            )
        return layout

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The degrees in the order of ``DIMS``."""
        return (self.dp, self.dp_shard, self.pp, self.tp)

    @property
    def devices(self) -> int:
        return self.dp * self.dp_shard * self.pp * self.tp

    @property
    def data_parallel(self) -> int:
        """How many shards the global batch is cut into: one per (replica, shard)."""
        return self.dp * self.dp_shard

    @property
    def averages_replicas(self) -> bool:
        """Pure dp x pp: each stage's plain gradients are averaged over its replicas after the
        schedule. Any FSDP or TP makes the gradients DTensors, and fully_shard reduces them instead."""
        return self.pp > 1 and self.dp_shard == 1 and self.tp == 1

    @property
    def fsdp_dims(self) -> tuple[str, ...]:
        """The dims fully_shard runs over: dp_shard, with dp outside it (HSDP: replicate over dp, shard
        over dp_shard) where there are replicas; none where there is no data parallelism or
        ``averages_replicas`` does the job."""
        if self.averages_replicas or self.data_parallel == 1:
            return ()
        return ("dp", "dp_shard") if self.dp > 1 else ("dp_shard",)

    def data_index(self, rank: int) -> int:
        """Which of the ``data_parallel`` batch shards ``rank`` trains on (its tp and pp peers share it)."""
        coords = self.coords(rank)
        return coords.replica * self.dp_shard + coords.shard

    def coords(self, rank: int) -> MeshCoords:
        """``(replica, shard, stage, tp_rank)`` of global ``rank``."""
        if not 0 <= rank < self.devices:
            raise ValueError(f"rank {rank} is outside a {' x '.join(map(str, self.shape))} mesh")
        rest, tp_rank = divmod(rank, self.tp)
        rest, stage = divmod(rest, self.pp)
        replica, shard = divmod(rest, self.dp_shard)
        return MeshCoords(replica, shard, stage, tp_rank)

    @property
    def grid_dims(self) -> tuple[str, ...]:
        """The dims of more than one rank, outermost first: the axes of ``ranks()``."""
        return tuple(name for name, size in zip(DIMS, self.shape, strict=True) if size > 1)

    def ranks(self) -> list:
        """The global ranks as a nested list over ``grid_dims`` (dp x pp: row d is replica d's pipeline)."""
        sizes = [size for size in self.shape if size > 1]

        def grid(offset: int, depth: int) -> list | int:
            if depth == len(sizes):
                return offset
            inner = 1
            for size in sizes[depth + 1:]:
                inner *= size
            return [grid(offset + i * inner, depth + 1) for i in range(sizes[depth])]

        whole = grid(0, 0)
        return whole if isinstance(whole, list) else [whole]

    def build(self, device_type: str, rank: int) -> DeviceMesh:
        """The DeviceMesh over the default group, checked to put ``rank`` where ``coords`` says.

        Shards and stages are cut by ``coords``; a mesh that disagreed would pair the wrong ones."""
        mesh = init_device_mesh(device_type, self.shape, mesh_dim_names=DIMS)
        built = MeshCoords(*(mesh.get_local_rank(name) for name in DIMS))
        if built != self.coords(rank):
            raise RuntimeError(f"DeviceMesh put rank {rank} at {tuple(built)}, expected {tuple(self.coords(rank))}")
        return mesh
