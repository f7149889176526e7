"""A language-model run's processes: torchrun's environment (`Dist`, `init_distributed`) and the steps only
rank 0 takes (`on_rank0`).

``torchrun --nproc_per_node=N -m cem_core lm train ...`` runs DistributedDataParallel (gloo on CPU, NCCL on
GPU); without torchrun a run is one process.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    """This process's place in a torchrun job: its rank, the number of ranks and its GPU (one rank of one
    without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed() -> Dist:
    """Read torchrun's environment and start the process group (gloo on CPU, NCCL on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    d = Dist(rank=int(os.environ["RANK"]), world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return d


def on_rank0(d: Dist, device: torch.device, step):
    """Run `step` on rank 0 only; every rank returns its result or raises its ValueError, so a
    refusal ends all ranks with the same message instead of leaving them waiting at a barrier."""
    result, error = None, None
    if d.main:
        try:
            result = step()
        except ValueError as err:
            error = str(err)
    if d.active:
        shared = [error, result]
        dist.broadcast_object_list(shared, src=0, device=device if device.type == "cuda" else None)
        error, result = shared
    if error is not None:
        raise ValueError(error)
    return result
