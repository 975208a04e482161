"""CELS, the joint end-to-end mode (issue 29 item 2; docs/privacy/cels.md §5): the default of
``cels run`` / ``cels local`` / ``cels party``.

* ``cels run`` on three shares (P0…P3 as OS processes, loopback mutual TLS, bounded time)
  writes ``release ump``'s end-to-end ledger (``counts_are_private: true``), equal to
  ``cels local``'s apart from the noise, the creation time, the randomness description and
  the ``protocol`` key; P1's exact joint figures (universe, activity profile) equal the
  centralized ones; the tables are consistent (log totals = counts, profile bins 1…m);
* transcript scan: no party received a pair string that is not published;
* ``cels local`` is ``release ump``'s synthetic-id release with ZEALOUS pair counts on the
  union of the shares (same seed → the same bytes); bounding each share = bounding the union;
* D vs D′ (one user removed), same seed: the public ledgers agree apart from the table sizes,
  for ``cels run`` and ``cels local``; two seeds give different counts;
* faults in the e2e phases are in tests/test_cels_faults.py (the fault matrix);
* the tables P1 sends are checked by every receiver (malformed ones name P1).

The share set is crafted so that pairs are published: 3,000 users clicking 1–4 of 40 pairs of
Zipf-like popularity (the popular pairs held by hundreds of users), each also clicking one
pair nobody else clicks ("secret of u"), split by user into three shares.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from _cels_shares import write_three_shares
from _neighbour import (
    assert_no_private_traces,
    assert_only_public_files,
    assert_provenance_beside,
    assert_same_public_ledger,
    public_ledger_diff,
)
from searchveil.cels.e2e_release import (
    TABLE_SCHEMAS,
    check_tables,
    decode_tables,
    encode_tables,
    tables_size_bound,
)
from searchveil.cels.local import local_e2e, pooled_log
from searchveil.cels.params import E2E_NOISY_FIELDS, CelsParams, Share
from searchveil.cels.runner import run_local
from searchveil.cels.wire import ProtocolError
from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.release.counts import count_by
from searchveil.release.ump.e2e import MECHANISM_SYNTHETIC, bounded_pairs, release_ump_e2e
from searchveil.release.ump.release import NOT_DP
from searchveil.rng import make_rng
from test_cels_protocol import _without_rarest_user

EPS, DELTA, MAX_USERS, M = 2.0, 1e-5, 10_000, 4  # δ < 1/U = 1e-4
PARAMS = CelsParams(epsilon=EPS, delta=DELTA, max_users=MAX_USERS, max_pairs=M)
PUBLIC = ["log.tsv", "counts.tsv", "profile.tsv"]
SEED = 7
#: what may differ between `cels run` and `cels local` besides noise and time
PROTOCOL_ONLY = ("protocol", "randomness.seed", "randomness.source")


def _write_crafted_shares(d: Path, users: int = 3000, pairs: int = 40) -> list[Path]:
    gen = np.random.Generator(np.random.PCG64(1))
    w = 1.0 / np.arange(1, pairs + 1)
    rows = []
    for u in range(users):
        k = int(gen.integers(1, 5))
        for j, p in enumerate(gen.choice(pairs, size=k, replace=False, p=w / w.sum())):
            rows.append((str(100 + u), f"q{p}", f"2006-03-01 10:{j:02d}:00", "1",
                         f"http://site{p}.example/"))  # fmt: skip
        rows.append((str(100 + u), f"secret of {u}", "2006-03-01 11:00:00", "1",
                     f"http://x{u}.org/"))  # fmt: skip
    return write_three_shares(rows, d)


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _write_crafted_shares(tmp_path_factory.mktemp("e2e-shares"))


@pytest.fixture(scope="module")
def joint(shares: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("e2e-run")
    t0 = time.perf_counter()
    res = run_local(shares, PARAMS, d / "out", transcripts=d / "tr", seed=SEED, timeout=120)
    return {"res": res, "dir": d, "seconds": time.perf_counter() - t0}


def _cli(*args: object) -> list[str]:
    return [str(a) for a in args]


def _tables(rel: Path) -> dict[str, pl.DataFrame]:
    return {
        n: pl.read_csv(rel / f"{n}.tsv", separator="\t", quote_char=None, infer_schema=False)
        for n in ("log", "counts", "profile")
    }


# -- cels run -------------------------------------------------------------------------------------
def test_run_writes_the_end_to_end_release(shares, joint) -> None:
    out = joint["dir"] / "out"
    assert_only_public_files(out, PUBLIC)
    led = json.loads((out / "ledger.json").read_text())
    assert led["mechanism"] == MECHANISM_SYNTHETIC
    g = led["guarantee"]
    assert g["counts_are_private"] is True and g["user_ids"] == "synthetic"
    assert led["epsilon"] <= EPS * (1 + 1e-9) and led["delta"] <= DELTA
    assert sum(s["epsilon"] for s in g["split"].values()) == pytest.approx(led["epsilon"])
    assert led["parameters"]["pairs"] == "zealous" and led["parameters"]["max_pairs"] == M
    assert led["declared"] == {"max_users": MAX_USERS}
    assert led["protocol"]["mode"] == "e2e" and led["protocol"]["parties"] == 3
    assert "paillier_bits" not in led["protocol"] and led["seeded"] is True
    t = _tables(out)
    counts = t["counts"].with_columns(pl.col("x_ij").cast(pl.Int64))
    # popular pairs are published, pairs held by one user never are
    assert counts.height >= 10
    assert counts.filter(pl.col("query").str.starts_with("secret")).is_empty()
    log = t["log"].with_columns(pl.col("Count").cast(pl.Int64))
    tot = log.group_by(pl.col("Query").alias("query"), pl.col("ClickURL").alias("url")).agg(
        pl.col("Count").sum().alias("x_ij")
    )
    assert tot.sort("query", "url").equals(counts.sort("query", "url"))
    assert t["profile"].get_column("pairs_per_user").to_list() == ["1", "2", "3", "4"]
    # what P1 sent is within the bound every receiver can compute from public values
    typed = {n: pl.read_csv(out / f"{n}.tsv", separator="\t", quote_char=None,
                            schema=TABLE_SCHEMAS[n]) for n in TABLE_SCHEMAS}  # fmt: skip
    pub = counts.rename({"x_ij": "noisy_count"})
    assert len(encode_tables(typed)) <= tables_size_bound(pub, M)
    # the phases that ran: no LP, no Algorithm 2, no sampling of real ids
    stats = joint["res"]["party_stats"]
    for p in stats[1:]:
        sent = set(p["traffic"]["sent"])
        assert {"union", "sum", "output", "profile"} <= sent, sent
        assert not sent & {"rows", "nlp", "solve", "unpermute", "verify", "sample"}
    assert set(stats[0]["traffic"]["sent"]) <= {"mesh", "setup", "commit"}
    assert stats[0]["worker_cpu_seconds"] == {}  # no Paillier key, no obfuscators


def test_run_equals_local_apart_from_noise(shares, joint, tmp_path) -> None:
    """`cels local` (no protocol) gives the same public ledger as `cels run` apart from the
    table sizes (noise), the creation time, the randomness description and `protocol`; P1's
    exact joint figures equal the centralized ones."""
    res = CliRunner().invoke(
        app, _cli("cels", "local", *sum((["--share", s] for s in shares), []), "--out",
                   tmp_path / "loc", "--epsilon", EPS, "--delta", DELTA, "--max-users",
                   MAX_USERS, "--max-pairs", M, "--seed", SEED, "--json"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run_out = joint["dir"] / "out"
    diff = public_ledger_diff(tmp_path / "loc", run_out, noisy=E2E_NOISY_FIELDS)
    assert diff and all(any(k.startswith(p) for p in PROTOCOL_ONLY) for k in diff), diff
    assert "protocol" not in json.loads((tmp_path / "loc" / "ledger.json").read_text())
    # P1's exact figures (its private provenance) against the centralized computation
    p1 = joint["res"]["party_stats"][1]["extra"]
    loc = json.loads((tmp_path / "loc.private.json").read_text())["report"]
    bounded = bounded_pairs(pooled_log([read_log(s) for s in shares]), M)
    assert p1["pair_counts"]["universe"] == bounded.select("query", "url").n_unique()
    run_pairs = set(_tables(run_out)["counts"].select("query", "url").iter_rows())
    loc_pairs = set(_tables(tmp_path / "loc")["counts"].select("query", "url").iter_rows())
    if run_pairs == loc_pairs:  # the same published pairs: the same exact joint profile
        assert p1["profile_exact"] == loc["profile_exact"]
    assert sum(p1["profile_exact"]) > 1000
    for p in joint["res"]["party_stats"][2:]:  # only P1 holds the joint figures
        assert "profile_exact" not in p["extra"] and "pair_counts" not in p["extra"]


def test_transcripts_hold_no_unpublished_string(shares, joint) -> None:
    """No party received a pair string that is not published: every unpublished pair of the
    crafted shares is a 'secret of u' pair at a http://x….org/ URL, and neither prefix is in
    any byte any party received; the published strings are (the scan can see them)."""
    tr = joint["dir"] / "tr"
    published = _tables(joint["dir"] / "out")["counts"]
    blobs = {k: (tr / f"P{k}.bin").read_bytes() for k in range(4)}
    assert stat.S_IMODE((tr / "P1.bin").stat().st_mode) == 0o600
    every = pl.concat([pl.read_csv(p, separator="\t", infer_schema=False) for p in shares])
    unpublished = (
        every.select("Query", "ClickURL")
        .unique()
        .join(published, left_on=["Query", "ClickURL"], right_on=["query", "url"], how="anti")
    )
    assert unpublished.height >= 2900
    assert unpublished.get_column("Query").str.starts_with("secret of ").all()
    assert unpublished.get_column("ClickURL").str.starts_with("http://x").all()
    for blob in blobs.values():
        assert b"secret of " not in blob and b"http://x" not in blob
    url = published.get_column("url")[0].encode()
    assert all(url in blobs[k] for k in range(4))


@pytest.mark.slow
def test_run_two_seeds_give_different_counts(shares, joint, tmp_path) -> None:
    run_local(shares, PARAMS, tmp_path / "o8", seed=SEED + 1, timeout=120)
    a = _tables(joint["dir"] / "out")["counts"]
    b = _tables(tmp_path / "o8")["counts"]
    assert a.height and b.height and not a.equals(b)


@pytest.mark.slow
def test_neighbour_audit_cels_run_e2e(shares, joint, tmp_path) -> None:
    """D vs D′ (the user with the rarest pairs removed), same seed: the ledgers agree apart
    from the table sizes; only the public files; nothing naming or sizing the input; the
    private provenance record beside the release."""
    d_prime, victim = _without_rarest_user(shares, tmp_path / "dprime")
    run_local(d_prime, PARAMS, tmp_path / "out", seed=SEED, timeout=120)
    rel_d, rel_dp = joint["dir"] / "out", tmp_path / "out"
    assert_same_public_ledger(rel_d, rel_dp, noisy=E2E_NOISY_FIELDS)
    for rel, paths in ((rel_d, shares), (rel_dp, d_prime)):
        assert_only_public_files(rel, PUBLIC)
        df = pl.concat([pl.read_csv(p, separator="\t", infer_schema=False) for p in paths])
        exact = {"rows": df.height, "users": df.get_column("AnonID").n_unique()}
        assert_no_private_traces(rel, paths, exact=exact)
        assert stat.S_IMODE(rel.with_name(rel.name + ".private.json").stat().st_mode) == 0o600
        log = pl.read_csv(rel / "log.tsv", separator="\t")
        assert log.equals(log.sort(["AnonID", "Query", "ClickURL"]))
        assert log.get_column("AnonID").min() == 1  # synthetic ids 1…N
    assert f"secret of {int(victim) - 100}" not in (rel_dp / "counts.tsv").read_text()


# -- cels local -----------------------------------------------------------------------------------
def test_local_is_release_ump_on_the_union(shares, tmp_path) -> None:
    """`cels local --mode e2e` = `release ump`'s synthetic-id release with ZEALOUS pair counts
    on the union of the shares: the same seed gives the same tables and ledger."""
    res = local_e2e(shares, PARAMS, rng=make_rng(SEED))
    central = release_ump_e2e(
        read_log(shares[0].parent / "all.tsv"), PARAMS.e2e(), rng=make_rng(SEED), metrics=False
    )
    assert list(res["tables"]) == ["log", "counts", "profile"]
    for name, table in res["tables"].items():
        assert table.equals(central.tables[name]), name
    led, cled = dict(res["ledger"]), dict(central.ledger)
    led.pop("created_utc"), cled.pop("created_utc")
    assert led == cled
    # bounding each share = bounding the union (parties hold disjoint users)
    per_share = (
        pl.concat(
            [
                count_by(Share.read(s, max_pairs=M).bounded, ["query", "url"], distinct_users=True)
                for s in shares
            ]  # fmt: skip
        )
        .group_by("query", "url")
        .agg(pl.col("count").sum())
    )
    union = count_by(
        bounded_pairs(read_log(shares[0].parent / "all.tsv"), M), ["query", "url"],
        distinct_users=True,
    )  # fmt: skip
    key = ["query", "url"]
    assert per_share.sort(key).equals(union.select(per_share.columns).sort(key))
    # two seeds: different counts
    other = local_e2e(shares, PARAMS, rng=make_rng(SEED + 1))
    assert not other["tables"]["counts"].equals(res["tables"]["counts"])


def test_pooled_log_keeps_the_parties_users_apart(shares) -> None:
    log = read_log(shares[0])
    assert pooled_log([log, log]).n_users == 2 * log.n_users


def test_neighbour_audit_cels_local_e2e(shares, tmp_path) -> None:
    d_prime, _ = _without_rarest_user(shares, tmp_path / "dprime")
    for name, paths in (("a", shares), ("b", d_prime)):
        res = CliRunner().invoke(
            app, _cli("cels", "local", *sum((["--share", s] for s in paths), []), "--out",
                       tmp_path / name, "--epsilon", EPS, "--delta", DELTA, "--max-users",
                       MAX_USERS, "--max-pairs", M, "--seed", SEED, "--json"),
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        assert_only_public_files(tmp_path / name, PUBLIC)
        assert_provenance_beside(tmp_path / name)
        rows = sum(pl.read_csv(p, separator="\t").height for p in paths)
        assert_no_private_traces(tmp_path / name, paths, exact={"rows": rows})
        led = json.loads((tmp_path / name / "ledger.json").read_text())
        assert led["guarantee"]["counts_are_private"] is True
    assert_same_public_ledger(tmp_path / "a", tmp_path / "b", noisy=E2E_NOISY_FIELDS)


# -- parameters, tables, help ---------------------------------------------------------------------
def test_params_modes() -> None:
    p = CelsParams(epsilon=EPS, delta=DELTA)
    assert p.mode == "e2e" and p.e2e().pairs == "zealous" and p.e2e().ids == "synthetic"
    assert p.to_dict()["mode"] == "e2e" and "key_bits" not in p.to_dict()
    c = CelsParams(epsilon=EPS, delta=0.3, objective="kl", mode="conditional")
    assert c.to_dict()["mode"] == "conditional" and "max_pairs" not in c.to_dict()
    bad = [
        {"objective": "kl"},  # e2e: no optimisation
        {"key_bits": 512},
        {"mode": "conditional", "objective": "kl", "max_pairs": 4},
        {"mode": "conditional"},  # conditional: no default objective
        {"mode": "joint"},
        {"max_users": 1000, "delta": 0.01},  # δ ≥ 1/U
        {"max_pairs": 0},
        {"split": (1.0, -1.0)},
    ]
    for kw in bad:
        with pytest.raises(InvalidParameterError):
            CelsParams(**({"epsilon": EPS, "delta": DELTA} | kw))
    with pytest.raises(InvalidParameterError):
        c.e2e()


def test_tables_are_checked_by_every_receiver() -> None:
    published = pl.DataFrame({"position": [3, 9], "query": ["a", "b"], "url": ["u", "v"],
                              "noisy_count": [2, 1]})  # fmt: skip
    tables = {
        "log": pl.DataFrame({"AnonID": [1, 2, 2], "Query": ["a", "a", "b"],
                             "ClickURL": ["u", "u", "v"], "Count": [1, 1, 1]}),
        "counts": pl.DataFrame({"query": ["a", "b"], "url": ["u", "v"], "x_ij": [2, 1]}),
        "profile": pl.DataFrame({"pairs_per_user": [1, 2], "users": [0, 1]}),
    }  # fmt: skip
    got = decode_tables(encode_tables(tables), 1)
    check_tables(got, published, 2, 1)
    assert len(encode_tables(tables)) <= tables_size_bound(published, 2)
    for k in got:
        assert got[k].equals(tables[k])
    doc = json.loads(encode_tables(tables))
    broken = [
        b"not json",
        json.dumps({k: v for k, v in doc.items() if k != "profile"}).encode(),
        json.dumps(doc | {"profile": {"pairs_per_user": [1, 2], "users": [0, True]}}).encode(),
        json.dumps(doc | {"counts": doc["counts"] | {"x_ij": [2]}}).encode(),
        json.dumps(doc | {"counts": doc["counts"] | {"x_ij": [2, 1 << 70]}}).encode(),
    ]
    for blob in broken:
        with pytest.raises(ProtocolError) as ei:
            decode_tables(blob, 1)
        assert ei.value.peer == 1
    wrong = [
        tables | {"counts": tables["counts"].with_columns(x_ij=pl.lit(5, pl.Int64))},
        tables | {"log": tables["log"].head(2)},  # totals ≠ counts
        tables | {"log": tables["log"].reverse()},  # not sorted
        tables | {"profile": tables["profile"].head(1)},
    ]
    for t in wrong:
        with pytest.raises(ProtocolError, match="P1 sent release tables"):
            check_tables(t, published, 2, 1)


def test_help_names_the_modes() -> None:
    for cmd in ("run", "party", "local"):
        res = CliRunner().invoke(app, ["cels", cmd, "--help"], terminal_width=200)
        text = " ".join(res.output.split())
        assert "--mode" in text and "e2e" in text, cmd
        assert "not differentially private" in text.lower(), cmd


def test_conditional_label_in_run_ledger_is_absent_in_e2e(joint) -> None:
    led = (joint["dir"] / "out" / "ledger.json").read_text()
    assert NOT_DP not in led and '"counts_are_private": true' in led
