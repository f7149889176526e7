"""The generated blocks of docs/: every table and sentence of numbers the documents show from the committed results,
each between its two markers, rewritten from the records by ``python -m cem_core docs`` (``--check``: only say
which are stale). A new generated block is one entry of ``BLOCKS``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cem_core.nn.registry import Registry


@dataclass(frozen=True)
class DocBlock:
    name: str
    document: str                         # under the repository's root
    start: str                            # the markers around it
    end: str
    make: Callable[[Path], str]           # the root -> the text between "start\n" and end

    def current(self, root: Path) -> str:
        """The block as the document holds it now."""
        text = (root / self.document).read_text()
        if self.start not in text or self.end not in text:
            raise ValueError(f"{self.document} has no block {self.name!r} (its markers {self.start!r} and "
                             f"{self.end!r})")
        return text[text.index(self.start) + len(self.start) + 1:text.index(self.end)]

    def write(self, root: Path) -> bool:
        """Rewrite the block from the records; True when it changed."""
        path = root / self.document
        text, old, new = path.read_text(), self.current(root), self.make(root)
        if old == new:
            return False
        head = text.index(self.start) + len(self.start) + 1
        path.write_text(text[:head] + new + text[text.index(self.end):])
        return True


BLOCKS = Registry("generated block")


def _ladder(preset: str, folder: str) -> Callable[[Path], str]:
    def make(root: Path) -> str:
        from .lm import ladder, runner
        return ladder.doc_block(runner.LM_SWEEP.load(root / folder / "results.json"), preset) + "\n"
    return make


def _tie_ladder(root: Path) -> str:
    from .lm import presets, runner, tie_ladder
    return tie_ladder.tie_block(runner.LM_SWEEP.load(root / presets.COMMITTED_TIE_LADDER / "results.json")) + "\n"


def _test_time(task: str) -> Callable[[Path], str]:
    def make(root: Path) -> str:
        from . import test_time
        if task == "gp":
            from .gp.sweep import GP_SWEEP as EXPERIMENT
            folder = test_time.COMMITTED_GP_TEST_TIME
        else:
            from .lm.runner import LM_SWEEP as EXPERIMENT
            folder = test_time.COMMITTED_LM_TEST_TIME
        return test_time.test_time_block(task, EXPERIMENT.load(root / folder / "results.json")) + "\n"
    return make


def _test_time_summaries(root: Path) -> str:
    from . import test_time
    from .gp.sweep import GP_SWEEP
    from .lm.runner import LM_SWEEP
    return test_time.summaries(GP_SWEEP.load(root / test_time.COMMITTED_GP_TEST_TIME / "results.json"),
                               LM_SWEEP.load(root / test_time.COMMITTED_LM_TEST_TIME / "results.json")) + "\n"


def _gp_rates(root: Path) -> str:
    from .gp import study
    from .gp.sweep import GP_SWEEP
    return study.rate_check_markdown(GP_SWEEP.load(root / study.COMMITTED_RATE_CHECK / "results.json"))


def _findings(root: Path) -> str:
    from . import trained_findings
    return trained_findings.findings_markdown(root / "models")


def _register() -> None:
    from . import test_time, trained_findings
    from .gp import study
    from .lm import ladder, tie_ladder
    for preset, folder in (("budget-ladder", "results/lm-budget-ladder"), ("ladder", "results/lm-ladder")):
        BLOCKS.register(DocBlock(preset, "docs/results-lm.md", *ladder.doc_markers(preset), _ladder(preset, folder)))
    BLOCKS.register(DocBlock("tie-ladder", "docs/results-lm.md", *tie_ladder.tie_markers(), _tie_ladder))
    for task in ("gp", "lm"):
        BLOCKS.register(DocBlock(f"test-time {task}", "docs/results-lm.md", *test_time.test_time_markers(task),
                                 _test_time(task)))
    BLOCKS.register(DocBlock("test-time summary", "docs/trained-models.md", *test_time.SUMMARY_MARKERS,
                             _test_time_summaries))
    BLOCKS.register(DocBlock("gp rates", "docs/results-gp.md", study.RATES_START, study.RATES_END, _gp_rates))
    BLOCKS.register(DocBlock("findings", "docs/trained-models.md", trained_findings.FINDINGS_START,
                             trained_findings.FINDINGS_END, _findings))


_register()


def stale_blocks(root: Path) -> list[str]:
    """The blocks whose text differs from what their records give now."""
    return [b.name for b in BLOCKS.values() if b.current(root) != b.make(root)]


def refresh(root: Path) -> list[str]:
    """Rewrite every block from its records; the names of those that changed."""
    return [b.name for b in BLOCKS.values() if b.write(root)]
