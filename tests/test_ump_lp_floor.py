"""Issue 30, item 4: ``release ump --solver lp-floor`` at the δ the docs recommend.

On a real 128-user AOL block at δ = 1e-6 and 1e-7 the LP relaxation returns tiny negative
values (−5.9e-8); flooring them gave −1, a negative count the repair does not remove, and the
command stopped with "UMP counts violate a privacy constraint". The LP solution is now clipped
at 0 before flooring (release/ump/solvers.py)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app


@pytest.fixture(scope="module")
def block(aol_top1000_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Users 512..639 of the shared top-1000 AOL file (the neighbour audit's block)."""
    df = pl.read_csv(aol_top1000_path, separator="\t", quote_char=None, infer_schema=False)
    df = df.select("AnonID", "Query", "QueryTime", "ItemRank", "ClickURL")
    users = df.get_column("AnonID").unique(maintain_order=True).slice(512, 128)
    p = tmp_path_factory.mktemp("ump") / "block.tsv"
    df.filter(pl.col("AnonID").is_in(users.implode())).write_csv(
        p, separator="\t", quote_style="never", null_value=""
    )
    return p


@pytest.mark.parametrize("delta", ["1e-6", "1e-7"])
def test_lp_floor_at_small_delta(block: Path, tmp_path: Path, delta: str) -> None:
    out = tmp_path / "san"
    r = CliRunner().invoke(
        app,
        ["release", "ump", str(block), "--out", str(out), "--objective", "size",
         "--mode", "conditional", "--solver", "lp-floor", "--epsilon", "0.69", "--delta", delta,
         "--seed", "1", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    counts = pl.read_csv(out / "counts.tsv", separator="\t")
    assert counts.height == 0 or counts.get_column(counts.columns[-1]).min() >= 0
