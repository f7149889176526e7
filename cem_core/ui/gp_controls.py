"""The GP page's controls: the sampled-function demo and the small model trained live (see cem_core.ui.controls)."""
from __future__ import annotations

from dataclasses import dataclass, field

from cem_core.experiments.gp.model import GPModelConfig
from cem_core.experiments.gp.task import KERNELS, GPTaskConfig
from cem_core.experiments.gp.train import GPTrainConfig
from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.config import CEMOptions, ModelShape

from .controls import Controls


@dataclass(frozen=True, kw_only=True)
class GPControls(Controls):
    """The GP page: the sampled-function demo and the small model trained live."""

    SPECS = {"kernel": ("choice", KERNELS), "seed": ("int", (0, 9999)), "context": ("int", (0, 32)),
             "steps": ("int", (50, 1000))}   # worst case (T=8, per-head D+LR): about 40 s on 2 cores
    SHAPE = {"activation": ("choice", ACTIVATIONS)}
    CEM = ("T", "diagonal")
    CEM_RANGES = {"T": (1, 8)}
    PREFIX = "gp_"

    kernel: str = "rbf"
    seed: int = 0
    context: int = 8
    shape: ModelShape = ModelShape(d_model=32, n_layers=1, n_heads=4, d_ff=64)
    cem: CEMOptions = field(default_factory=lambda: CEMOptions(T=2))
    steps: int = 600

    def __post_init__(self) -> None:
        self._validate()

    def task(self) -> GPTaskConfig:
        return GPTaskConfig(kernel=self.kernel)

    def model(self) -> GPModelConfig:
        return GPModelConfig(shape=self.shape, cem=self.cem)

    def train(self) -> GPTrainConfig:
        return GPTrainConfig(steps=self.steps, batch_size=32, eval_size=256, seed=self.seed)
