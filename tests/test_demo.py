"""``searchveil demo`` (the README's main job): releases with ledgers and HTML reports for the
bundled real sample and a synthetic log calibrated on it; atomic; refuses to overwrite."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.cli import app

runner = CliRunner()


def _run(args: list[object]):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.slow
def test_demo_real_and_synthetic(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = _run(["demo", "--out", out, "--synthetic-users", 3000, "--seed", 5, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert set(res["runs"]) == {"real", "synthetic"} and res["seeded"] is True
    for name, run in res["runs"].items():
        led = json.loads((out / name / "ledger.json").read_text())
        assert led["epsilon"] <= math.log(10) * (1 + 1e-12) and led["delta"] <= 1e-4
        assert led["seeded"] is True
        html = Path(run["report"]).read_text()
        assert html.startswith("<!DOCTYPE html>") or "<html" in html[:200]
        assert run["report"] == str((out / f"{name}-report.html").resolve())
    assert res["runs"]["real"]["users"] == 215
    assert res["runs"]["synthetic"]["users"] == 3000
    led = json.loads((out / "real" / "ledger.json").read_text())
    assert led["inputs"][0]["file"] == "aol-gayo-avello-215-users.tsv"
    # no temporary directories left beside the output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


@pytest.mark.slow
def test_demo_secure_by_default_and_refuses_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = _run(["demo", "--out", out, "--synthetic-users", 0, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "real" / "ledger.json").read_text())["seeded"] is False
    before = sorted(p.name for p in out.iterdir())
    assert before == ["real", "real-report.html"]
    r = _run(["demo", "--out", out, "--synthetic-users", 0])
    assert r.exit_code == 2 and "exists" in r.output
    r = _run(["demo", "--out", out, "--synthetic-users", -1, "--overwrite"])
    assert r.exit_code == 2 and "synthetic-users" in r.output
    assert sorted(p.name for p in out.iterdir()) == before
    r = _run(["demo", "--out", out, "--synthetic-users", 0, "--overwrite", "--seed", 1])
    assert r.exit_code == 0, r.output
    assert "NOT FOR RELEASE" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


@pytest.mark.slow
def test_demo_report_names_final_paths_and_renders(tmp_path: Path) -> None:
    """The report as a person sees it: rendered by headless Chromium (scripts/
    screenshot_report.sh), the screenshot shows tables and coloured plots, not a blank page."""
    import shutil
    import subprocess

    import numpy as np
    import pytest

    out = tmp_path / "demo"
    r = _run(["demo", "--out", out, "--synthetic-users", 3000, "--seed", 2, "--json"])
    assert r.exit_code == 0, r.output
    html = (out / "synthetic-report.html").read_text()
    assert ".tmp-" not in html and str(out.resolve() / "synthetic") in html
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.skip("chromium is not installed (Debian package `chromium`)")
    png = tmp_path / "shot.png"
    script = Path(__file__).resolve().parents[1] / "scripts" / "screenshot_report.sh"
    subprocess.run(
        ["bash", str(script), str(out / "synthetic-report.html"), str(png), "1280x2000"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[:, :, :3]
    assert img.shape[:2] == (2000, 1280)
    non_white = (img.min(axis=2) < 0.9).mean()
    assert non_white > 0.05  # text, tables and plots, not an empty page
    # matplotlib's default blue (#1f77b4) of the coverage/count plots is on the page
    blue = (np.abs(img - np.array([0x1F, 0x77, 0xB4]) / 255).max(axis=2) < 0.08).sum()
    assert blue > 500
