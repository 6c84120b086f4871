"""The degrees of parallelism of a run, as one value: validated by arithmetic, rank <-> coordinates, the mesh.

Like torchtitan's ``ParallelDims``: a new dimension (FSDP's dp-shard, tensor parallelism) is one
more field here, not three more loose functions in a strategy.

    --devices 4 --dp 2 --pp 2       rank = replica * pp + stage rank   (pp innermost)

                   stage rank 0      stage rank 1
    replica 0        rank 0   ---->   rank 1        pp sub-group {0, 1}
    replica 1        rank 2   ---->   rank 3        pp sub-group {2, 3}
                   dp {0, 2}         dp {1, 3}
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

DIMS = ("dp", "pp")
"""The mesh's dimension names, outermost first."""
LAYOUT = "pp innermost: rank = replica * pp + stage rank"


@dataclass(frozen=True)
class MeshLayout:
    """``dp`` replicas x ``pp`` pipeline ranks, pp innermost: rank = replica * pp + stage rank."""

    dp: int
    pp: int

    @classmethod
    def for_devices(cls, devices: int, dp: int | None, pp: int | None) -> MeshLayout:
        """As given, one degree filled in from the other, or pp = 2 when neither is.

        Raises ValueError showing the arithmetic when the product is not ``devices``."""
        if dp is None and pp is None:
            pp = 2
        if pp is None:
            pp = devices // max(1, dp or 1)
        if dp is None:
            dp = devices // max(1, pp)
        if dp * pp != devices:
            raise ValueError(
                f"dp({dp}) * pp({pp}) != devices({devices}); choose --dp and --pp whose product is --devices"
            )
        return cls(dp, pp)

    @property
    def devices(self) -> int:
        return self.dp * self.pp

    def coords(self, rank: int) -> tuple[int, int]:
        """``(replica, stage rank)`` of global ``rank``."""
        if not 0 <= rank < self.devices:
            raise ValueError(f"rank {rank} is outside a {self.dp} x {self.pp} mesh")
        replica, stage_rank = divmod(rank, self.pp)
        return replica, stage_rank

    def ranks(self) -> list[list[int]]:
        """The global ranks as a dp x pp grid: row d is replica d's pipeline, column s a dp sub-group."""
        return [[d * self.pp + s for s in range(self.pp)] for d in range(self.dp)]

    def build(self, device_type: str, rank: int) -> DeviceMesh:
        """The DeviceMesh over the default group, checked to put ``rank`` where ``coords`` says.

        Shards and stages are cut by ``coords``; a mesh that disagreed would pair the wrong ones."""
        mesh = init_device_mesh(device_type, (self.dp, self.pp), mesh_dim_names=DIMS)
        built = (mesh.get_local_rank("dp"), mesh.get_local_rank("pp"))
        if built != self.coords(rank):
            raise RuntimeError(f"DeviceMesh put rank {rank} at {built}, expected {self.coords(rank)}")
        return mesh
