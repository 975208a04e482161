"""Every HTML report the CLI writes, as a person sees it (issue 26): generated here from small
inputs through the command line, then opened in headless Chromium at 1280 × 900 CSS px
(tests/_browser.py, DevTools protocol over a pipe). Each report must

* fit the window: ``document.documentElement.scrollWidth <= window.innerWidth`` (and the client
  width), no element scrolling sideways inside the page or sticking out past its right edge;
* show every image (``naturalWidth > 0``);
* log no console error;

and, checked without a browser too: no error message inside a table data cell (failed or
infeasible settings are listed under the table with their reason) and no product-history
wording. Without Chromium (Debian package ``chromium``) the browser part skips with that reason;
CI installs it (.ci/run). The heavier reports (compare, the demo, the CELS protocol runs,
every reproduce experiment, ...) are marked ``slow``: CI runs them too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _browser import Chromium, chromium_path
from searchveil.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
TABULAR = ROOT / "tests" / "data" / "tabular"
TINY_GRAPH = ROOT / "tests" / "data" / "attacks" / "two_triangles_and_tail.txt"
# compare's nine default settings (with a user bound) and one that cannot meet the budget, so
# the report shows nine columns' worth of settings and a failure with its reason
NINE = [
    "korolova:d=1", "korolova:d=5", "korolova:d=20", "zealous:m=1,items=queries",
    "zealous:m=4,items=queries", "zealous:m=1,items=clicks", "zealous:m=1,items=query_pairs",
    "select:strategy=gaussian,d=20", "kanon:k=10",
]  # fmt: skip
FAILING = "korolova:split=1/0"

runner = CliRunner()


def _cli(*args: object) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


def _graph(tmp: Path) -> Path:
    """A 40-node random graph (as tests/test_social_cli.py's)."""
    import itertools

    import numpy as np

    gen = np.random.default_rng(4)
    lines = ["# tiny test graph", "# FromNodeId\tToNodeId"]
    for i, j in itertools.combinations(range(40), 2):
        if gen.random() < 0.12:
            lines.append(f"{100 + i}\t{100 + j}")
    p = tmp / "g.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


# -- how each report kind is made (small inputs) -----------------------------------------------
def _evaluate(tmp: Path) -> list[Path]:
    _cli("release", "korolova", SAMPLE, "--out", tmp / "rel", "--epsilon", 2.3, "--delta", 1e-7,
         "--max-queries", 5, "--max-clicks", 1, "--seed", 1)  # fmt: skip
    _cli("evaluate", SAMPLE, tmp / "rel", "--report", tmp / "evaluate.html",
         "--substitution-queries", 50)  # fmt: skip
    return [tmp / "evaluate.html"]


def _evaluate_ump(tmp: Path) -> list[Path]:
    """``sanitize ump`` writes no report of its own: ``evaluate`` of its release adds the UMP
    metrics."""
    _cli("sanitize", "ump", SAMPLE, "--mode", "conditional",
         "--out", tmp / "ump", "--objective", "diversity",
         "--epsilon", 0.7, "--delta", 0.5, "--solver", "spe", "--seed", 1)  # fmt: skip
    _cli("evaluate", SAMPLE, tmp / "ump", "--report", tmp / "ump.html",
         "--substitution-queries", 50)  # fmt: skip
    return [tmp / "ump.html"]


def _compare(tmp: Path) -> list[Path]:
    mech = [a for m in [*NINE, FAILING] for a in ("--mechanisms", m)]
    _cli("compare", SAMPLE, "--epsilon", 2.3, "--delta", 1e-7, "--max-users", 700000, *mech,
         "--seed", 1, "--substitution-queries", 50, "--report", tmp / "compare.html")  # fmt: skip
    html = (tmp / "compare.html").read_text(encoding="utf-8").replace("<wbr>", "")
    assert "Settings that could not run" in html and FAILING in html
    return [tmp / "compare.html"]


def _demo(tmp: Path) -> list[Path]:
    _cli("demo", "--out", tmp / "demo", "--synthetic-users", 2000, "--seed", 2)
    return [tmp / "demo" / "report.html", tmp / "demo" / "real-report.html"]


def _reproduce_quick(tmp: Path) -> list[Path]:
    ids = ["korolova-table-4.1", "korolova-fig-4.1", "goetz-table-1", "goetz-table-2",
           "goetz-table-3", "goetz-fig-3", "korolova-fig-4.2"]  # fmt: skip
    _cli("reproduce", *ids, "--log", SAMPLE, "--report", tmp / "reproduce.html")
    return [tmp / "reproduce.html"]


def _reproduce_all(tmp: Path) -> list[Path]:
    _cli("reproduce", "--log", SAMPLE, "--report", tmp / "reproduce-all.html")
    return [tmp / "reproduce-all.html"]


def _social(tmp: Path) -> list[Path]:
    _cli("social", "reproduce", "--graph", _graph(tmp), "--report", tmp / "social.html",
         "--epsilons", "0.5,3", "--gammas", "0.05", "--target-fraction", 0.5, "--public-node-set",
         "--seed", 3)  # fmt: skip
    return [tmp / "social.html"]


def _attack(tmp: Path) -> list[Path]:
    _cli("attack", "reproduce", "--report", tmp / "attack.html", "--nodes", 400, "--dmin", 3,
         "--seed", 1, "--real-graph", f"tiny={TINY_GRAPH}", "--strategies",
         "highest,random,crawler", "--table61-nodes", 0, "--fig62-nodes", "400,1600",
         "--ads-epsilon", "1,4", "--ads-population", 2000, "--ads-targets", 5)  # fmt: skip
    return [tmp / "attack.html"]


def _ads(tmp: Path) -> list[Path]:
    _cli("attack", "ads", "--epsilon", "1,4", "--population", 2000, "--targets", 10,
         "--seed", 1, "--report", tmp / "ads.html")  # fmt: skip
    return [tmp / "ads.html"]


def _tabular(tmp: Path) -> list[Path]:
    _cli("tabular", "reproduce", "--data", TABULAR, "--quick", "--seed", 1,
         "--report", tmp / "tabular.html")  # fmt: skip
    html = (tmp / "tabular.html").read_text(encoding="utf-8")
    assert "Infeasible runs" in html  # the small table cannot meet every (ε, δ)
    return [tmp / "tabular.html"]


def _cels(tmp: Path) -> list[Path]:
    _cli("cels", "reproduce", "--report", tmp / "cels.html", "--quick", "--key-bits", 512,
         "--parties", "2")  # fmt: skip
    # the paper's protocol, labelled in the report (issue 29)
    assert "not differentially private" in (tmp / "cels.html").read_text(encoding="utf-8")
    return [tmp / "cels.html"]


def _long_tokens(tmp: Path) -> list[Path]:
    """The house style alone (report/html.py) with the worst content: a 400-character URL and
    query, a long path, snake_case headers, a long failure reason, many columns."""
    from searchveil.report.html import failed_list, page, table, write_report

    url = "http://example.com/" + "averyveryverylongpathsegment" * 14
    body = [
        f"<p>Path <code>/{'very-long-directory-name/' * 12}report.html</code> and {url}.</p>",
        table(["query", "from original", "from release"], [[url, url, "x " * 200]], left=3),
        table([f"column_number_{i}_of_twelve" for i in range(12)], [[1.234567e-8] * 12]),
        failed_list("Settings that could not run:", [("setting:" + "x" * 300, "why " * 100)]),
    ]
    p = tmp / "long.html"
    write_report(p, page("long tokens", "house style", body))
    return [p]


# the default tier renders the reports that take a few seconds to make; the full tier
# (``slow``) the ones whose command runs for 10 s or more on 2 cores
KINDS: dict[str, Callable[[Path], list[Path]]] = {
    "evaluate": _evaluate,
    "reproduce": _reproduce_quick,
    "social-reproduce": _social,
    "attack-ads": _ads,
    "house-style": _long_tokens,
}
SLOW_KINDS: dict[str, Callable[[Path], list[Path]]] = {
    "evaluate-ump": _evaluate_ump,
    "compare": _compare,
    "demo": _demo,
    "attack-reproduce": _attack,
    "tabular-reproduce": _tabular,
    "cels-reproduce": _cels,
    "reproduce-all": _reproduce_all,
}

# error text a data cell must never hold, and wording about the product's past
_CELL = re.compile(r"<td[^>]*>([^<]*)</td>")
_ERROR_WORDS = re.compile(r"\b(invalid|error|Error|Traceback|exception|failed)\b")
_HISTORY = re.compile(r"old demo|previous version|used to be|no longer|formerly", re.I)


def _static_checks(html: str) -> None:
    for cell in _CELL.findall(html):
        assert not _ERROR_WORDS.search(cell), f"error text in a data cell: {cell[:200]!r}"
    m = _HISTORY.search(html)
    assert m is None, f"product-history wording: {html[max(0, m.start() - 80) : m.end() + 40]!r}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium | None]:
    if chromium_path() is None:
        yield None
        return
    with Chromium() as br:
        yield br


def _check(kind: str, make: Callable[[Path], list[Path]], tmp: Path, br: Chromium | None) -> None:
    pages = make(tmp)
    for p in pages:
        _static_checks(p.read_text(encoding="utf-8"))
    if br is None:
        pytest.skip(
            "chromium is not installed (Debian package `chromium`): the layout of the "
            f"{kind} report was not checked in a browser"
        )
    for p in pages:
        res = br.check(p, width=1280, height=900)
        assert res.layout["tables"] + res.layout["images"] > 0, f"{p.name}: empty page?"
        assert res.problems() == [], f"{kind} ({p.name}): {res.problems()}"


# the evaluate report's own content is tested in test_report.py; its browser check (~14 s,
# most of it the evaluation) runs in the full tier
@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if k == "evaluate" else k for k in KINDS]
)
def test_report_fits_the_window(kind: str, tmp_path: Path, browser: Chromium | None) -> None:
    _check(kind, KINDS[kind], tmp_path, browser)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SLOW_KINDS))
def test_heavy_report_fits_the_window(kind: str, tmp_path: Path, browser: Chromium | None) -> None:
    _check(kind, SLOW_KINDS[kind], tmp_path, browser)


def test_browser_check_catches_a_wide_page(tmp_path: Path, browser: Chromium | None) -> None:
    """The check itself: a page that scrolls sideways, a broken image and a console error are
    each reported."""
    if browser is None:
        pytest.skip("chromium is not installed (Debian package `chromium`)")
    p = tmp_path / "bad.html"
    p.write_text(
        "<!DOCTYPE html><html><body><div style='width:2000px'>wide</div>"
        "<img alt='broken' src='data:image/png;base64,AAAA'>"
        "<script>console.error('boom')</script></body></html>"
    )
    probs = " | ".join(browser.check(p).problems())
    assert "scrolls sideways" in probs and "broken" in probs and "boom" in probs
