"""Issue 39, honest labels (item 6; issue 42 item 4): what the guarantee says to readers.

* ``release ump`` and the CELS commands print the δ ≥ 1/U warning the other families print
  (stderr, and under ``private`` in ``--json``);
* a ``--mode conditional`` release's ledger says "not differentially private" at its top level
  — no relation, no bare ε/δ — and keeps the sampling's (ε, δ) under ``guarantee.conditional``;
* reports and summaries draw a guarantee that is not DP in the warning style, and the report's
  banner shows the ε/δ split as a small table, not a dictionary.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
runner = CliRunner()


def _run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _flat(text: str) -> str:
    return " ".join(text.split())


def _split_sample(d: Path) -> list[Path]:
    """The 215-user sample as two CELS shares (users by parity)."""
    df = pl.read_csv(SAMPLE, separator="\t", quote_char=None, infer_schema=False)
    out = []
    for k in range(2):
        p = d / f"share{k}.tsv"
        df.filter(pl.col("AnonID").cast(pl.Int64) % 2 == k).write_csv(p, separator="\t")
        out.append(p)
    return out


def _tiny(d: Path) -> Path:
    rows = ["AnonID\tQuery\tQueryTime\tItemRank\tClickURL"]
    rows += [f"{u}\tq{q}\t2006-03-01 10:00:00\t1\thttp://s{q}.com"
             for u in range(8) for q in range(u % 3 + 1)]  # fmt: skip
    p = d / "tiny.tsv"
    p.write_text("\n".join(rows) + "\n")
    return p


# -- the δ ≥ 1/U warning -----------------------------------------------------------------------
def test_release_ump_warns_when_delta_does_not_protect_everyone(tmp_path: Path) -> None:
    """The issue's command (no --max-users): δ of the release ≥ 1/U (U = the exact users)."""
    r = _run("release", "ump", SAMPLE, "--epsilon", 2, "--delta", 0.3, "--pairs", "zealous",
             "--max-pairs", 1, "--out", tmp_path / "u", "--seed", 1, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "warning" in r.stderr and "1/U" in r.stderr, r.stderr
    res = json.loads(r.stdout)
    assert "1/U" in res["private"]["delta_warning"]
    assert res["private"]["delta_check"]["ok"] is False
    r = _run("release", "ump", SAMPLE, "--epsilon", 2, "--delta", 1e-6, "--pairs", "zealous",
             "--max-pairs", 1, "--out", tmp_path / "u2", "--seed", 1, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "1/U" not in r.stderr and json.loads(r.stdout)["private"]["delta_warning"] is None


@pytest.mark.parametrize("mode", ["e2e", "conditional"])
def test_cels_local_warns_when_delta_does_not_protect_everyone(tmp_path: Path, mode: str) -> None:
    shares = _split_sample(tmp_path)
    extra = (["--mode", "conditional", "--objective", "kl"] if mode == "conditional"
             else ["--union-epsilon", 2])  # fmt: skip
    r = _run("cels", "local", "--share", shares[0], "--share", shares[1], "--epsilon", 2,
             "--delta", 0.3, *extra, "--out", tmp_path / "c", "--seed", 1, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "warning" in r.stderr and "1/U" in r.stderr, r.stderr
    assert "1/U" in json.loads(r.stdout)["private"]["delta_warning"]


def test_cels_party_and_run_warning_and_its_bound() -> None:
    """``cels run`` sums every party's users; ``cels party`` knows only its own (a lower bound
    of the joint count: a warning is certain, its absence not) and P0 none: it says so."""
    from searchveil.cels.params import CelsParams
    from searchveil.cli.cels import delta_warning

    e2e = CelsParams(epsilon=2.0, delta=0.3, union_epsilon=2.0)
    led = {"delta": 0.3}
    run = delta_warning(e2e, led, [{"users": 100}, {"users": 115}], party=False)
    assert run is not None and "1/U = 0.00465" in run
    party = delta_warning(e2e, led, [{"users": 100}], party=True)
    assert party is not None and "lower bound" in party
    p0 = delta_warning(e2e, led, [], party=True)
    assert p0 is not None and "not checked" in p0
    assert delta_warning(e2e, {"delta": 1e-9}, [{"users": 100}], party=True) is None
    declared = CelsParams(epsilon=2.0, delta=1e-6, max_users=1000, union_epsilon=2.0)
    assert delta_warning(declared, {"delta": 1e-6}, [], party=True) is None  # δ < 1/U enforced
    cond = CelsParams(epsilon=2.0, delta=0.3, mode="conditional", objective="kl")
    cond_led = {"delta": None, "guarantee": {"conditional": {"delta": 0.3}}}
    assert "1/U" in (delta_warning(cond, cond_led, [{"users": 10}], party=False) or "")


# -- a conditional release is not DP at the top of its ledger -----------------------------------
def _check_conditional_ledger(led: dict, eps: float, delta: float) -> None:
    assert led["relation"] == "none" and led["epsilon"] is None and led["delta"] is None
    assert led["split"] == {}
    assert "not differentially private" in led["neighbouring"]
    assert "not differentially private" in led["notion"].lower()
    g = led["guarantee"]
    assert g["differentially_private"] is False
    assert (g["conditional"]["epsilon"], g["conditional"]["delta"]) == (eps, delta)
    assert g["conditional"]["split"] and g["conditional"]["relation"] != "none"


def test_conditional_ledgers_say_not_dp_at_the_top(tmp_path: Path) -> None:
    log = _tiny(tmp_path)
    cond = ["--mode", "conditional", "--objective", "size", "--search-seconds", 0.05]
    r = _run("release", "ump", log, *cond, "--epsilon", 2, "--delta", 0.3, "--out",
             tmp_path / "u", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    _check_conditional_ledger(json.loads((tmp_path / "u" / "ledger.json").read_text()), 2.0, 0.3)
    res = json.loads(r.stdout)
    assert res["epsilon"] is None and res["differentially_private"] is False
    assert res["sampling_given_counts"]["epsilon"] == 2.0
    shares = _split_sample(tmp_path)
    r = _run("cels", "local", "--share", shares[0], "--share", shares[1], "--epsilon", 2,
             "--delta", 0.3, "--mode", "conditional", "--objective", "kl", "--out",
             tmp_path / "c", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    _check_conditional_ledger(json.loads((tmp_path / "c" / "ledger.json").read_text()), 2.0, 0.3)
    r = _run("release", "ump", log, *cond, "--epsilon", 2, "--delta", 0.3, "--out",
             tmp_path / "u2")  # fmt: skip
    assert r.exit_code == 0 and "NOT differentially private" in _flat(r.stdout), r.output


# -- reports and summaries ---------------------------------------------------------------------
def test_banners_and_summaries_warn_when_not_dp_and_show_the_split_as_a_table(
    tmp_path: Path,
) -> None:
    from searchveil.cli._common import guarantee_text
    from searchveil.evaluate import _release_summary, load_release
    from searchveil.report.comparison import _guarantee_cell
    from searchveil.report.evaluation import guarantee_banner

    log = _tiny(tmp_path)
    for out, args in (
        ("dp", ["--epsilon", 2, "--delta", 1e-4, "--max-pairs", 2, "--max-users", 100]),
        ("cond", ["--mode", "conditional", "--objective", "size", "--epsilon", 2, "--delta",
                  0.3, "--search-seconds", 0.05]),
    ):  # fmt: skip
        r = _run("release", "ump", log, *args, "--out", tmp_path / out)
        assert r.exit_code == 0, r.output
    r = _run("release", "kanon", log, "--k", 2, "--out", tmp_path / "kanon")
    assert r.exit_code == 0, r.output
    dp, cond, kanon = (
        _release_summary(load_release(tmp_path / n)) for n in ("dp", "cond", "kanon")
    )
    html = guarantee_banner(dp)
    assert html.startswith('<div class="guarantee">') and "<table>" in html
    assert "pair counts" in html and "hours" in html  # the split of the same-schema statistics
    assert "{'" not in html and "{&quot;" not in html and "&#x27;epsilon" not in html
    html = guarantee_banner(cond)
    assert html.startswith('<div class="warn">') and "<table>" in html
    assert "not differentially private" in html and "only the sampling" in html
    assert guarantee_banner(kanon).startswith('<div class="warn">')
    assert "warn-text" in _guarantee_cell(kanon) and "warn-text" not in _guarantee_cell(dp)
    assert "[bold red]" in guarantee_text(cond) and "[bold red]" in guarantee_text(kanon)
    assert "[bold red]" not in guarantee_text(dp)
