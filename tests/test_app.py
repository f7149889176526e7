"""The app runs headless on its defaults and after each control change (AppTest)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_app_runs_on_defaults():
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and not at.error
    assert "energy" in at.title[0].value


@pytest.mark.parametrize("label,value", [("steps T", 16), ("step size eta", 0.05), ("anchor", 2.0)])
def test_app_survives_control_changes(label, value):
    at = AppTest.from_file(APP, default_timeout=60).run()
    next(s for s in at.slider if s.label.startswith(label)).set_value(value).run()
    assert not at.exception and not at.error
