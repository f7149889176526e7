"""The quick loop (`pytest -m "not slow"`): a module marked slow as a whole is not even imported, and a
parameter grid keeps a few rows that between them take every value of every column (tests/conftest.py)."""
import itertools
from pathlib import Path

import pytest
from conftest import QUICK_LOOP, covering, pytest_ignore_collect, wholly_slow

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("source,slow", [
    ("pytestmark = pytest.mark.slow\n", True),
    ("pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('x')]\n", True),
    ("pytestmark = pytest.mark.usefixtures('x')\n", False),
    ("import pytest\n\n\n@pytest.mark.slow\ndef test_one():\n    pass\n\n\ndef test_two():\n    pass\n", False),
    ("def f():\n    pytestmark = pytest.mark.slow\n", False),            # not at module level
])
def test_a_module_is_wholly_slow_only_by_its_own_module_level_mark(tmp_path, source, slow):
    path = tmp_path / "test_module.py"
    path.write_text(source)
    assert wholly_slow(path) is slow


class _Config:
    def __init__(self, markexpr):
        self.markexpr = markexpr

    def getoption(self, name, default=None):
        return self.markexpr if name == "markexpr" else default


def test_only_the_quick_loop_skips_the_wholly_slow_modules():
    """`-m "not slow"` skips them unread; the whole suite, `-m slow` and any other expression import them."""
    browser, descent = TESTS / "test_browser.py", TESTS / "test_descent.py"
    assert pytest_ignore_collect(browser, _Config(QUICK_LOOP)) is True
    assert pytest_ignore_collect(descent, _Config(QUICK_LOOP)) is None
    for markexpr in ("", "slow", "not slow and not browser"):
        assert pytest_ignore_collect(browser, _Config(markexpr)) is None
    assert pytest_ignore_collect(TESTS / "conftest.py", _Config(QUICK_LOOP)) is None


def test_the_covering_rows_take_every_value_and_the_rest_are_slow():
    grid = list(itertools.product(("none", "dlr", "psd"), (1, 2, 3, 8), (0.0, 0.7)))
    params = covering(grid)
    assert [p.values for p in params] == grid                               # the same rows, in order
    quick = [p.values for p in params if not p.marks]
    slow = [p for p in params if p.marks]
    assert all(m.name == "slow" for p in slow for m in p.marks)
    for column, values in enumerate(zip(*grid)):
        assert {row[column] for row in quick} == set(values), column
    assert len(quick) == 4 and len(slow) == len(grid) - 4                  # at most the longest column's length here
