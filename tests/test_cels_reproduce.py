"""`cels reproduce` building blocks (no processes): user split, paper cleaning, CELS vs LS
utility (CELS never worse), modelled bandwidth rows in the Table 5 layout."""

from __future__ import annotations

import polars as pl

from searchveil.cels.reproduce import (
    clean_log,
    modelled_bandwidth,
    split_users,
    synthetic_log,
    utility_cels_vs_ls,
)


def test_split_and_clean() -> None:
    log = synthetic_log(90, seed=2)
    parts = split_users(log, 3)
    users = [set(p.df.get_column("user").to_list()) for p in parts]
    assert sum(len(u) for u in users) == log.n_users
    assert not (users[0] & users[1]) and not (users[1] & users[2])
    assert sum(p.n_rows for p in parts) == log.df.filter(pl.col("url").is_not_null()).height
    cl = clean_log(log, 5)
    cnt = cl.df.group_by(["query", "url"]).len()
    assert cnt.get_column("len").min() >= 5 and cl.n_rows < log.n_rows


def test_cels_utility_not_worse_than_local() -> None:
    log = synthetic_log(150, seed=4)
    rows = utility_cels_vs_ls(log, (2, 3), [(0.2, 0.5), (1.0, 0.5 / log.n_users)], min_count=1)
    assert len(rows) == 4
    for r in rows:
        assert r["cels_kl"] <= r["ls_kl"] + 1e-9
        assert r["protects_everyone"] == (r["delta"] < 1 / log.n_users)
    strict = [r for r in rows if r["protects_everyone"]]
    assert all(r["cels_output_size"] == 0 for r in strict)  # δ < 1/users: nothing released
    loose = [r for r in rows if not r["protects_everyone"]]
    assert any(r["cels_kl"] < r["ls_kl"] for r in loose)
    bw = modelled_bandwidth(log, (2, 4), min_count=1, records=10)
    assert [b["r"] for b in bw] == [2, 4]
    assert bw[1]["default_keys_mb"] > bw[0]["default_keys_mb"] > 0
