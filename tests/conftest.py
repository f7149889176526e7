import socket

import pytest
import torch


@pytest.fixture
def float64():
    """Run a test in float64 (the exactness tolerance 1e-9 needs it), restoring the default after."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def randomize_(module: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Give every diagonal, preconditioner and norm parameter a non-trivial random value, so a
    test cannot pass because some term starts at zero or one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("diag") or ".preconditioner." in name or name.startswith("preconditioner."):
                p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_terminal_summary(terminalreporter):
    """Make a skipped browser test impossible to miss."""
    skipped = terminalreporter.stats.get("skipped", [])
    if any("BROWSER TEST DID NOT RUN" in str(getattr(r, "longrepr", "")) for r in skipped):
        bar = "!" * 78
        terminalreporter.write_line(bar, red=True, bold=True)
        terminalreporter.write_line("WARNING: the real-browser test of the app DID NOT RUN (no chromium found).",
                                    red=True, bold=True)
        terminalreporter.write_line("Install Debian's chromium (apt-get install chromium) or run .ci/run.",
                                    red=True, bold=True)
        terminalreporter.write_line(bar, red=True, bold=True)
