"""CELS, the joint end-to-end mode (issues 29, 41 and 42; docs/privacy/cels.md §5): the default
of ``cels run`` / ``cels local`` / ``cels party``, with its default log, the input's own columns
(``--schema input``: release ump's statistics summed securely), and the counts log.

* ``cels run`` on three shares (P0…P3 as OS processes, loopback mutual TLS, bounded time)
  writes the distributed-noise ledger (``counts_are_private: true``, every statistic in the
  split), equal to ``cels local``'s apart from the noise, the creation time, the randomness
  description and the ``protocol`` key; the tables are release ump's (an AOL log with times,
  ranks and query-only rows, the per-pair and per-query tables, the statistics);
* no party's private record holds a joint exact figure: with the counts log each holds its
  own share's profile, and those add up to the joint one;
* transcript scan: no party received a pair string that is not published;
* D vs D′ (one user removed): every party's transcript has the same size and the same frames
  (phase, type, sizes), for 3 parties (and 5 in the full tier); the public ledgers agree apart
  from the table sizes (the neighbour audit);
* in one process (every random choice reproducible): a planted joint count (777 holders), the
  exact joint activity profile (counts log) and every exact joint histogram of the input's
  columns appear in no message any party receives — and do, with the noise shares removed
  (the mutant); ``cels local`` computes the same statistics as ``cels run`` (with the noise
  removed, the same vectors); what P1 holds after unmasking is the exact holder
  counts plus every party's noise share and nothing else, the only part that differs between
  D and D′ being ≤ m counts by 1 each;
* faults in the e2e phases are in tests/test_cels_faults.py (the fault matrix).

The share set is crafted so that pairs are published: 3,000 users clicking 1–4 of 40 pairs of
Zipf-like popularity (the popular pairs held by hundreds of users), each also clicking one
pair nobody else clicks ("secret of u"), split by user into three shares.
"""

from __future__ import annotations

import dataclasses
import json
import stat
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

import searchveil.cels.e2e as e2e
from _cels_inproc import deterministic, run_inproc
from _cels_shares import COLUMNS, write_three_shares
from _neighbour import (
    assert_no_private_traces,
    assert_only_public_files,
    assert_provenance_beside,
    assert_same_public_ledger,
    public_ledger_diff,
)
from searchveil.cels.e2e_release import MECHANISM, decode_records, encode_pair
from searchveil.cels.local import local_e2e, pooled_log
from searchveil.cels.params import E2E_NOISY_FIELDS, PAIR_BYTES, CelsParams, Share
from searchveil.cels.runner import run_local
from searchveil.cels.wire import ProtocolError
from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.mechanisms.shares import PolyaShares, SkellamShares
from searchveil.release.ump.e2e import activity_profile, bounded_pairs
from searchveil.release.ump.release import NOT_DP
from searchveil.rng import make_rng
from test_cels_protocol import _without_rarest_user

EPS, DELTA, MAX_USERS, M = 2.0, 1e-5, 10_000, 4  # δ < 1/U = 1e-4
EPS_U = EPS  # --union-epsilon (required, no default): stated equal to ε here
L, K = 1500, 64  # public sizes: every share holds ~1,040 distinct bounded pairs
LQ, MQ, E = 1500, 3, 16  # query pairs per share, per user (a user of the crafted log has ≤ 4)
PERIOD = "2006-03-01..2006-03-31"
COUNTS = CelsParams(epsilon=EPS, delta=DELTA, max_users=MAX_USERS, max_pairs=M,
                    max_party_pairs=L, max_published_pairs=K, union_epsilon=EPS_U,
                    schema="counts")  # fmt: skip
#: the default log, the input's columns: E small enough that the noisy size of the 3,000 users'
#: log is not mostly noise, the period declared (the log has times; a month of 3,000 users is
#: below the released period's threshold at this ε), m_q = 3 (the Skellam calibration of the
#: query pairs, in every party process, is a tenth of the rule's m_q = 13's)
PARAMS = CelsParams(epsilon=EPS, delta=DELTA, max_users=MAX_USERS, max_pairs=M,
                    max_party_pairs=L, max_published_pairs=K, union_epsilon=EPS_U,
                    max_events=E, max_query_pairs=MQ, max_party_query_pairs=LQ,
                    period=PERIOD)  # fmt: skip
PUBLIC = ["log.tsv", "queries.tsv", "counts.tsv", "ranks.tsv", "query_pairs.tsv",
          "head_profile.tsv", "statistics.tsv"]  # fmt: skip
PUBLIC_COUNTS = ["log.tsv", "counts.tsv", "profile.tsv"]
SEED = 7
#: what may differ between `cels run` and `cels local` besides noise and time (what P0 sees of
#: the unions is spent by `cels run` only: no P0 in `cels local`; the events after the
#: readers' are the unions' views)
PROTOCOL_ONLY = ("protocol", "randomness.seed", "randomness.source", "epsilon", "delta",
                 "split.union_view_p0", "split.query_union_view_p0", "guarantee.against_p0",
                 "guarantee.model")  # fmt: skip
# what every e2e command line here states besides ε and δ: ε_u, the public sizes, E, the period
SIZES = ("--union-epsilon", EPS_U, "--max-party-pairs", L, "--max-published-pairs", K,
         "--max-events", E, "--max-query-pairs", MQ, "--max-party-query-pairs", LQ,
         "--period", PERIOD)  # fmt: skip


def _crafted_rows(users: int = 3000, pairs: int = 40, planted: int = 0) -> list[tuple]:
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
    for u in range(planted):  # a pair of exactly `planted` holders, spread over the shares
        rows.append((str(5000 + u), "planted query", "2006-03-01 12:00:00", "1",
                     "http://planted.example/"))  # fmt: skip
    return rows


def _write_crafted_shares(d: Path, users: int = 3000, pairs: int = 40) -> list[Path]:
    return write_three_shares(_crafted_rows(users, pairs), d)


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
        p.stem: pl.read_csv(p, separator="\t", quote_char=None, infer_schema=False)
        for p in sorted(rel.glob("*.tsv"))
    }


def _protocol_only(led: dict) -> tuple[str, ...]:
    """:data:`PROTOCOL_ONLY` and the events of the unions' views (after the readers' events)."""
    n = len(led["guarantee"]["split"])  # one event per step of the readers' split …
    n -= sum(1 for v in led["guarantee"]["split"].values() if "note" in v)  # … post-processing
    return (*PROTOCOL_ONLY, *(f"events[{i}]" for i in range(n, len(led["events"]))))


def _frames(path: Path) -> list[tuple[str, str, int, int]]:
    """Every frame of a transcript file as (phase, type, body bytes, blob bytes)."""
    from searchveil.cels.wire import HEADER, PHASES, TYPES

    b = path.read_bytes()
    i, out = b.index(b"\n") + 1, []
    while i < len(b):
        _, _, ph, ty, jl, bl = HEADER.unpack(b[i : i + HEADER.size])
        out.append((PHASES[ph], TYPES[ty], jl, bl))
        i += HEADER.size + jl + bl
    return out


# -- cels run -------------------------------------------------------------------------------------
def test_run_writes_the_end_to_end_release(shares, joint) -> None:
    out = joint["dir"] / "out"
    assert_only_public_files(out, PUBLIC)
    led = json.loads((out / "ledger.json").read_text())
    assert led["mechanism"] == MECHANISM
    g = led["guarantee"]
    assert g["counts_are_private"] is True and g["user_ids"] == "synthetic"
    assert g["schema"] == "input" and "'tail'" in g["joint_statistics"]
    assert "semi-honest" in g["model"] and "own noise share" in g["model"]
    readers = g["readers"]
    assert readers["epsilon"] <= EPS * (1 + 1e-9) and readers["delta"] <= DELTA
    # the parts as computed; the total the budget asked for
    assert sum(s["epsilon"] for s in g["split"].values()) <= readers["epsilon"] + 1e-12
    assert readers["epsilon"] == pytest.approx(EPS) and readers["delta"] == pytest.approx(DELTA)
    # what is spent (charged): what P0 sees, the output and the unions' views (ε_u as stated)
    assert led["epsilon"] == pytest.approx(EPS + EPS_U)
    assert led["delta"] == pytest.approx(2 * DELTA)
    assert set(led["split"]) == {*g["split"], "union_view_p0", "query_union_view_p0"}
    par = led["parameters"]
    st = par["statistics"]
    # every statistic of release ump's input's columns but the declared period's months
    assert set(g["split"]) == {"pair_counts", *st["weights"], "layout"} and "months" not in st[
        "weights"]  # fmt: skip
    assert st["max_events"] == E and st["period"] == PERIOD.split("..")
    assert par["pairs"] == "zealous" and par["max_pairs"] == M and par["parties"] == 3
    assert par["party_pairs"] == L and par["published_pairs"] == K
    assert par["party_query_pairs"] == LQ
    assert par["pair_bytes"] == PAIR_BYTES and par["noise"]["pair_counts"]["tau_prime"] >= 1
    ev = {e["step"]: e for e in led["events"]}
    assert ev["pair_counts"]["noise"]["distribution"] == "skellam_shares"
    assert ev["query_pairs"]["noise"]["distribution"] == "skellam_shares"
    assert ev["pair_counts"]["noise"]["contributors"] == 4
    assert ev["pair_counts"]["noise"]["shares_for_the_full_noise"] == 3
    for name, scale in st["noise_scales"].items():  # release ump's scales, in Pólya shares
        assert ev[name]["noise"]["distribution"] == "polya_shares_of_discrete_laplace"
        assert ev[name]["noise"]["scale"] == pytest.approx(scale) and ev[name]["delta"] == 0
        assert ev[name]["epsilon"] == pytest.approx(ev[name]["l1_sensitivity"] / scale)
    assert led["declared"] == {"max_users": MAX_USERS}
    assert led["protocol"]["mode"] == "e2e" and led["protocol"]["parties"] == 3
    assert led["protocol"]["schema"] == "input"
    assert led["protocol"]["paillier"] == "none" and led["seeded"] is True
    # P0's views of the unions: the dummies' parameters, half of ε_u each
    for key, bound in (("union", L), ("query_union", LQ)):
        union = par[key]
        assert union["sets"] == 4 and union["epsilon"] <= EPS_U / 2 + 1e-12
        assert union["delta"] <= DELTA / 2
        assert par[f"{key}_list_length"] == bound + union["max_dummies_per_party"]
    assert par["union_epsilon"] == EPS_U  # the parameter stated, in the ledger
    p0 = g["against_p0"]
    assert p0["union_view"]["union_epsilon"] == EPS_U and p0["epsilon"] == led["epsilon"]
    assert [e["step"] for e in led["events"][-2:]] == ["union_view_p0", "query_union_view_p0"]
    t = _tables(out)
    # release ump's tables: an AOL log with times in the period, ranks and query-only rows
    log = t["log"]
    assert log.columns == ["AnonID", "Query", "QueryTime", "ItemRank", "ClickURL"]
    assert log.height > 1000 and log.get_column("ClickURL").null_count() > 0
    times = log.get_column("QueryTime").drop_nulls()
    assert times.len() == log.height and times.min() >= "2006-03-01"
    assert times.max() < "2006-04-02"  # a session begun on the last day may end on the next
    counts = t["counts"].with_columns(pl.col("x_ij").cast(pl.Int64))
    # popular pairs are published, pairs held by one user never are
    assert counts.height >= 10
    assert counts.filter(pl.col("query").str.starts_with("secret")).is_empty()
    assert set(t["queries"].get_column("query")) == set(counts.get_column("query"))
    assert t["ranks"].height == t["counts"].height * 16  # a noisy rank histogram per pair
    stat_names = set(t["statistics"].get_column("statistic"))
    own_tables = {"query_pairs", "head_events", "pair_ranks", "head_profile"}
    assert stat_names == {*st["weights"]} - own_tables
    # the phases that ran: no LP, no Algorithm 2, no sampling of real ids, no profile; P0 joins
    # both unions and adds its noise shares, and never receives a slot's total
    stats = joint["res"]["party_stats"]
    rounds = {"union", "sum", "output", "query_union", "query_sum", "query_output", "shape",
              "head"}  # fmt: skip
    for p in stats[1:]:
        sent = set(p["traffic"]["sent"])
        assert rounds <= sent, sent
        assert not sent & {"rows", "nlp", "solve", "unpermute", "verify", "sample", "profile"}
    assert set(stats[0]["traffic"]["sent"]) == {"setup", "union", "sum", "query_union",
                                                "query_sum", "shape", "head", "commit"}  # fmt: skip
    assert not {"publish", "query_publish"} & set(stats[0]["traffic"]["received"])
    assert stats[0]["worker_cpu_seconds"] == {}  # no Paillier key, no obfuscators


def _check_counts_log(results: list, planted: list[Share]) -> None:
    """`--schema counts` (a run in one process): the four-column log, its totals equal to the
    published counts, the profile's bins 1…m; every data party's private record holds its own
    share's activity profile, and these add up to the joint profile; no joint exact figure."""
    t = results[0].tables
    assert list(t) == ["log", "counts", "profile"]
    tot = t["log"].group_by(pl.col("Query").alias("query"), pl.col("ClickURL").alias("url")).agg(
        pl.col("Count").sum().alias("x_ij"))  # fmt: skip
    assert tot.sort("query", "url").equals(t["counts"].sort("query", "url"))
    assert t["profile"].get_column("pairs_per_user").to_list() == [1, 2, 3, 4]
    assert set(results[1].stats["extra"]) == {"pair_counts", "profile_own_share", "generator"}
    assert set(results[0].stats["extra"]) == {"generator"}
    published = t["counts"].select("query", "url")
    own = []
    for k, sh in enumerate(planted, start=1):
        assert sh.bounded is not None
        own.append(activity_profile(sh.bounded, published, M))
        assert results[k].stats["extra"]["profile_own_share"] == own[-1].tolist()
    pooled = pooled_log([sh.log for sh in planted if sh.log is not None])
    joint_exact = activity_profile(bounded_pairs(pooled, M), published, M)
    assert (sum(own) == joint_exact).all() and joint_exact.sum() > 1000


def test_no_private_record_holds_a_joint_exact_figure(shares, joint, tmp_path) -> None:
    """`cels local` (no protocol) gives the same public ledger as `cels run` apart from the
    table sizes (noise), the creation time, the randomness description and `protocol`. No
    party's private record holds a joint exact figure: P1 keeps noisy ones only (the counts
    log's own profiles: :func:`_check_counts_log`)."""
    res = CliRunner().invoke(
        app, _cli("cels", "local", *sum((["--share", s] for s in shares), []), "--out",
                   tmp_path / "loc", "--epsilon", EPS, "--delta", DELTA, "--max-users",
                   MAX_USERS, "--max-pairs", M, *SIZES, "--seed", SEED, "--json"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run_out = joint["dir"] / "out"
    diff = public_ledger_diff(tmp_path / "loc", run_out, noisy=E2E_NOISY_FIELDS)
    only = _protocol_only(json.loads((run_out / "ledger.json").read_text()))
    assert diff and all(any(k == p or k.startswith((p + ".", p + "[")) for p in only)
                        for k in diff), diff  # fmt: skip
    assert "protocol" not in json.loads((tmp_path / "loc" / "ledger.json").read_text())
    stats = joint["res"]["party_stats"]
    assert set(stats[1]["extra"]) == {"pair_counts", "query_pairs", "generator"}
    for what in ("pair_counts", "query_pairs"):
        assert set(stats[1]["extra"][what]) == {
            "slots", "tau_prime", "published_slots", "cap", "above_tau_prime"
        }  # fmt: skip
    assert set(stats[2]["extra"]) == set(stats[0]["extra"]) == {"generator"}


def test_transcripts_hold_no_unpublished_string(shares, joint) -> None:
    """No party received a pair string that is not published: the unpublished pairs of the
    crafted shares are the 'secret of u' pairs at http://x….org/ URLs (each held by one user;
    the query pairs they end are held by one user too), and neither prefix is in any byte any
    party received."""
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
    # every 'secret of u' pair is unpublished (held by one user), and so, by chance, may be one
    # of the least held popular pairs (≈ 44 holders against τ' = 33 at m = 4, ε_c = 1.4)
    secret = unpublished.filter(pl.col("Query").str.starts_with("secret of "))
    assert secret.height >= 2900 and unpublished.height - secret.height <= 3
    assert secret.get_column("ClickURL").str.starts_with("http://x").all()
    for blob in blobs.values():
        assert b"secret of " not in blob and b"http://x" not in blob


def test_neighbour_same_transcript_sizes_and_ledger(shares, joint, tmp_path) -> None:
    """D vs D′ (the user with the rarest pairs removed), same seed: every party's transcript
    has the same size and the same frames (phase, type, body and blob sizes) — no length
    shows the data; the neighbour audit: the ledgers agree apart from the table sizes, only
    the public files, nothing naming or sizing the input, the private record beside it."""
    d_prime, victim = _without_rarest_user(shares, tmp_path / "dprime")
    run_local(d_prime, PARAMS, tmp_path / "out", transcripts=tmp_path / "tr", seed=SEED,
              timeout=120)  # fmt: skip
    for k in range(4):
        a, b = joint["dir"] / "tr" / f"P{k}.bin", tmp_path / "tr" / f"P{k}.bin"
        assert a.stat().st_size == b.stat().st_size, k
        assert Counter(_frames(a)) == Counter(_frames(b)), k
    rel_d, rel_dp = joint["dir"] / "out", tmp_path / "out"
    assert_same_public_ledger(rel_d, rel_dp, noisy=E2E_NOISY_FIELDS)
    for rel, paths in ((rel_d, shares), (rel_dp, d_prime)):
        assert_only_public_files(rel, PUBLIC)
        df = pl.concat([pl.read_csv(p, separator="\t", infer_schema=False) for p in paths])
        exact = {"rows": df.height, "users": df.get_column("AnonID").n_unique()}
        assert_no_private_traces(rel, paths, exact=exact)
        assert stat.S_IMODE(rel.with_name(rel.name + ".private.json").stat().st_mode) == 0o600
        log = pl.read_csv(rel / "log.tsv", separator="\t", infer_schema=False)
        log = log.with_columns(pl.col("AnonID").cast(pl.Int64))
        assert log.equals(log.sort(["AnonID", "QueryTime"], maintain_order=True))  # not input's
        assert log.get_column("AnonID").min() >= 1  # synthetic ids 1…N (a few hold no event)
    assert f"secret of {int(victim) - 100}" not in (rel_dp / "counts.tsv").read_text()


@pytest.mark.slow
def test_five_parties_same_transcript_sizes_on_a_neighbour(tmp_path) -> None:
    """Five shares (users by id mod 5): every party's transcript has the same size and frames
    on D and on D minus one user of P3 (the input's columns: both item rounds and both
    statistics sums)."""
    df = pl.DataFrame(_crafted_rows(), schema=COLUMNS, orient="row")
    victim = df.filter(pl.col("AnonID").cast(pl.Int64) % 5 == 2).get_column("AnonID")[0]
    sizes = []
    for name, data in (("d", df), ("dp", df.filter(pl.col("AnonID") != victim))):
        paths = []
        for k in range(5):
            p = tmp_path / name / f"share{k + 1}.tsv"
            p.parent.mkdir(exist_ok=True)
            data.filter(pl.col("AnonID").cast(pl.Int64) % 5 == k).write_csv(p, separator="\t")
            paths.append(p)
        params = dataclasses.replace(PARAMS, max_party_pairs=800, max_party_query_pairs=800)
        run_local(paths, params, tmp_path / f"out-{name}", transcripts=tmp_path / f"tr-{name}",
                  seed=SEED, timeout=180)  # fmt: skip
        sizes.append({k: _frames(tmp_path / f"tr-{name}" / f"P{k}.bin") for k in range(6)})
    for k in range(6):
        assert Counter(sizes[0][k]) == Counter(sizes[1][k]), k


@pytest.mark.slow
def test_run_two_seeds_give_different_counts(shares, joint, tmp_path) -> None:
    run_local(shares, PARAMS, tmp_path / "o8", seed=SEED + 1, timeout=120)
    a = _tables(joint["dir"] / "out")["counts"]
    b = _tables(tmp_path / "o8")["counts"]
    assert a.height and b.height and not a.equals(b)


# -- in one process: what each party holds ---------------------------------------------------------
@pytest.fixture(scope="module")
def planted_paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_three_shares(_crafted_rows(planted=777), tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def planted(planted_paths: list[Path]) -> list[Share]:
    return [Share.for_params(p, PARAMS) for p in planted_paths]


@pytest.fixture(scope="module")
def planted_minus_one(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Share], str]:
    """D′: the planted shares without the first user of P2's share (id mod 3 = 1)."""
    rows = _crafted_rows(planted=777)
    victim = next(r[0] for r in rows if int(r[0]) % 3 == 1)
    paths = write_three_shares([r for r in rows if r[0] != victim],
                               tmp_path_factory.mktemp("planted-dprime"))  # fmt: skip
    return [Share.for_params(p, PARAMS) for p in paths], victim


def _recorder(monkeypatch: pytest.MonkeyPatch, zero_noise: bool = False) -> dict:
    """Record what P1 holds after unmasking (the totals it thresholds), every party's slots
    and noise shares; ``zero_noise``: the mutant whose shares are all 0."""
    seen: dict = {"shares": {}, "slots": {}}
    real_union, real_pub = e2e.E2EPhases.e2e_union, e2e.published_slots

    def recording(real: object) -> object:
        def sample(self: object, size: int, rng: object) -> np.ndarray:
            out = real(self, size, rng) * (0 if zero_noise else 1)  # type: ignore[operator]
            seen["shares"].setdefault(threading.current_thread().name, []).append(out)
            return out

        return sample

    def union(self: e2e.E2EPhases, rd: e2e.ItemRound, items: object) -> np.ndarray:
        slots = real_union(self, rd, items)
        if rd.what == "pair_counts":  # the pairs' union (not the query pairs')
            seen["slots"][self.me] = slots
        return slots

    def published(total: np.ndarray, tau: int, cap: int, **kw: object) -> tuple:
        seen.setdefault("total", total.copy())  # the pair counts: the first thresholded sum
        return real_pub(total, tau, cap, **kw)

    monkeypatch.setattr(PolyaShares, "sample", recording(PolyaShares.sample))
    monkeypatch.setattr(SkellamShares, "sample", recording(SkellamShares.sample))
    monkeypatch.setattr(e2e.E2EPhases, "e2e_union", union)
    monkeypatch.setattr(e2e, "published_slots", published)
    return seen


def _ok(results: list) -> None:
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, bad
    assert len({r.digest for r in results}) == 1


def _be(values: np.ndarray) -> bytes:
    return np.asarray(values, dtype=">i8").tobytes()


def _exact_joint_statistics(shares: list[Share], tables: dict[str, pl.DataFrame]) -> dict:
    """Every exact joint vector of the two statistics sums (the sum of the parties' own, as the
    protocol forms them, per-item ones padded to K) but ``multiplicity`` (its holdings are
    chosen with each party's random salt), given the published values of ``tables``."""
    from searchveil.cels.e2e_schema import head_given, party_vector, segments

    params = PARAMS.with_parties(len(shares))
    noise, st = params.noise(), params.e2e().statistics
    assert st is not None and st.period is not None
    pairs = tables["counts"].select("query", "url", pl.col("x_ij").alias("noisy_count"))
    out = {}
    for stage in ("shape", "head"):
        segs = segments(noise, stage, period=st.period, k=K)
        given = [{} if stage == "shape" else
                 head_given(st.period, pairs, tables["query_pairs"], sh.bounded)
                 for sh in shares]  # fmt: skip
        vec = sum(party_vector(segs, sh.log, st, salt=0, k=K, given=g)
                  for sh, g in zip(shares, given, strict=True))  # fmt: skip
        at = 0
        for name, n in segs:
            if name != "multiplicity":
                out[name] = np.asarray(vec[at : at + n])
            at += n
    return out


@pytest.mark.parametrize("schema", ["input", "counts"])
def test_a_planted_count_and_the_joint_histograms_reach_nobody(planted, monkeypatch, schema):
    """A pair held by exactly 777 users and every exact joint histogram — the activity profile
    of the counts log; the input's columns' size, shape, days, head, tail and head-share
    histograms —: none appears in any message any party receives (every random choice fixed:
    a reproducible run), and all do once the noise shares are removed (the mutant), so the
    scan can see a leak."""
    params = PARAMS if schema == "input" else COUNTS
    seen_exact = []
    for zero in (False, True):
        # a fixed run whose noise at the planted pair is not 0 (P ≈ 6 % for a random one)
        with monkeypatch.context() as mp, deterministic(mp, seed=5):
            seen = _recorder(mp, zero_noise=zero)
            hub, results = run_inproc(params, planted, seed=11)
        _ok(results)
        if schema == "counts":
            if not zero:
                _check_counts_log(results, planted)
            exact = {"profile": np.sum([r.stats["extra"]["profile_own_share"]
                                        for r in results[1:]], axis=0)}  # fmt: skip
            assert exact["profile"].sum() > 1000
        else:
            exact = _exact_joint_statistics(planted, results[0].tables)
            assert {"events", "activity", "hours", "days", "head_events", "tail"} <= set(exact)
        blobs = b"".join(b for k in hub.blobs for b in hub.blobs[k])
        published = results[0].tables["counts"]
        pl_row = published.filter(pl.col("query") == "planted query")
        assert pl_row.height == 1  # published: every party received its noisy count
        # every vector but those of one nonzero bin (a run of zeros and one count could be a
        # piece of any padded frame): on the crafted log, gaps, clicks, ranks, days and
        # head_events (every user clicks a pair once) are
        checked = {k: v for k, v in exact.items() if np.count_nonzero(v) >= min(2, v.size)}
        want = (
            {"profile"}
            if schema == "counts"
            else {"events", "activity", "hours", "pair_ranks", "head_share", "sessions"}
        )
        assert want <= set(checked), set(checked)
        if not zero:
            assert pl_row.get_column("x_ij")[0] != 777
            assert _be([777]) not in blobs
            assert not [k for k, v in checked.items() if _be(v) in blobs]
            assert "total" in seen  # P1 thresholded its (noisy) totals
        else:  # the mutant: P1 holds and sends the exact figures; the scan sees them
            assert _be([777]) in blobs and all(_be(v) in blobs for v in checked.values())
        seen_exact.append(exact)
    for k, v in seen_exact[0].items():  # the same data, the same exact vectors
        assert (v == seen_exact[1][k]).all(), k


def test_joint_statistics_move_within_release_umps_bounds(planted, planted_minus_one) -> None:
    """The joint statistics' sensitivity, exactly: on D and on D′ = D minus one user of P2, the
    sums of the parties' exact vectors (what the noise is added to; the same salts and published
    values) differ by at most `release ump`'s ℓ1 bound of each statistic — `tail` too, the sum
    of the parties' own histograms — and the user's removal does move them."""
    from searchveil.cels.e2e_schema import head_given, party_vector, segments

    dprime, _ = planted_minus_one
    params = PARAMS.with_parties(3)
    noise, st = params.noise(), params.e2e().statistics
    assert st is not None and st.period is not None
    held = pl.concat([sh.hist.pairs for sh in planted]).group_by("query", "url").agg(
        pl.col("holders").sum().alias("noisy_count")).sort("noisy_count", "query", "url",
                                                           descending=True).head(10)  # fmt: skip
    none = pl.DataFrame(schema={"query": pl.String, "next_query": pl.String,
                                "noisy_count": pl.Int64})  # fmt: skip
    moved = {}
    for stage in ("shape", "head"):
        segs = segments(noise, stage, period=st.period, k=K)
        sums = []
        for shares in (planted, dprime):
            given = [{} if stage == "shape" else head_given(st.period, held, none, sh.bounded)
                     for sh in shares]  # fmt: skip
            pairs = enumerate(zip(shares, given, strict=True))
            sums.append(sum(party_vector(segs, sh.log, st, salt=k, k=K, given=g)
                            for k, (sh, g) in pairs))  # fmt: skip
        at = 0
        for name, n in segs:
            moved[name] = int(np.abs(sums[0][at : at + n] - sums[1][at : at + n]).sum())
            assert moved[name] <= st.l1(name), (name, moved[name], st.l1(name))
            at += n
    assert moved["events"] >= 1 and moved["activity"] == 1 and moved["tail"] >= 1, moved


def test_local_computes_the_same_statistics_as_run(planted, planted_paths, monkeypatch) -> None:
    """`cels local` and `cels run` compute the same function: with every noise share removed
    (the mutant that shows the exact values), the same published pairs and query pairs with
    the same counts, the same per-query and per-pair tables and every statistic the same
    (``multiplicity`` but its total: each party chooses its holdings with its own salt)."""
    with monkeypatch.context() as mp, deterministic(mp, seed=3):
        _recorder(mp, zero_noise=True)
        _, results = run_inproc(PARAMS, planted, seed=11)
        loc = local_e2e(planted_paths, PARAMS, rng=make_rng(SEED))["tables"]
    _ok(results)
    run = results[0].tables
    assert list(run) == list(loc) == ["log", "queries", "counts", "ranks", "query_pairs",
                                      "head_profile", "statistics"]  # fmt: skip
    for name in ("queries", "counts", "ranks", "query_pairs"):
        assert run[name].equals(loc[name]), name
    mult = pl.col("statistic") == "multiplicity"
    assert run["statistics"].filter(~mult).equals(loc["statistics"].filter(~mult))
    assert run["statistics"].filter(mult).get_column("noisy_count").sum() == loc[
        "statistics"].filter(mult).get_column("noisy_count").sum()  # fmt: skip
    assert run["counts"].height >= 10 and run["statistics"].height > 100


def _p1_view(params: CelsParams, shares: list[Share], monkeypatch) -> tuple[dict, dict, object]:
    with monkeypatch.context() as mp, deterministic(mp, seed=5):
        seen = _recorder(mp)
        hub, results = run_inproc(params, shares, seed=13)
    _ok(results)
    # per pair: P1's unmasked total at its slot minus every party's noise share there
    noise = sum(seen["shares"][f"P{k}"][0] for k in range(len(shares) + 1))
    exact: dict[tuple[str, str], int] = {}
    for k, sh in enumerate(shares, start=1):
        pairs = sh.hist.pairs
        slots = seen["slots"][k]
        for (q, u, _), s in zip(pairs.select("query", "url", "holders").iter_rows(), slots,
                                strict=True):  # fmt: skip
            exact[(q, u)] = int(seen["total"][s] - noise[s])
    residual = seen["total"] - noise
    taken = np.zeros(residual.size, dtype=bool)
    for k in range(1, len(shares) + 1):
        taken[seen["slots"][k]] = True
    return exact, {"empty_slots_exact": residual[~taken]}, hub


def test_p1_view_is_the_counts_plus_every_share_and_differs_only_by_them(
    planted, planted_minus_one, monkeypatch
) -> None:
    """What P1 holds after unmasking is, slot by slot, the joint bounded holder count plus the
    r + 1 noise shares (P1 knows one of them): subtracting every share gives the exact counts
    of D, and of D′ = D minus one user of P2 — differing only at that user's pairs, by 1 each
    (≤ m of them) —, 0 on every slot no pair holds; the frames P1 (and every party) receives
    have the same types and sizes on D and D′."""
    dprime, victim = planted_minus_one
    b = planted[1].bounded
    assert b is not None
    ex_d, rest_d, hub_d = _p1_view(COUNTS, planted, monkeypatch)
    ex_dp, rest_dp, hub_dp = _p1_view(COUNTS, dprime, monkeypatch)
    want = {}
    for sh in planted:
        for q, u, h in sh.hist.pairs.select("query", "url", "holders").iter_rows():
            want[(q, u)] = want.get((q, u), 0) + h
    assert ex_d == want  # P1's view minus the noise: exactly the counts
    assert (rest_d["empty_slots_exact"] == 0).all() and (rest_dp["empty_slots_exact"] == 0).all()
    mine = set(b.filter(pl.col("user").cast(pl.String) == victim).select("query", "url")
               .iter_rows())  # fmt: skip
    assert 1 <= len(mine) <= M
    changed = {p for p in ex_d if ex_d[p] != ex_dp.get(p, 0)}
    assert changed == mine and all(ex_d[p] - ex_dp.get(p, 0) == 1 for p in changed)
    for k in range(4):
        assert Counter(hub_d.received[k]) == Counter(hub_dp.received[k]), k


# -- cels local -----------------------------------------------------------------------------------
def test_local_runs_the_same_mechanism(shares, tmp_path) -> None:
    """`cels local --mode e2e` (the counts log): the joint release with the same distributed
    noise as `cels run`; bounding each share = bounding the union; two seeds give different
    counts."""
    res = local_e2e(shares, COUNTS, rng=make_rng(SEED))
    assert list(res["tables"]) == ["log", "counts", "profile"]
    assert res["ledger"]["mechanism"] == MECHANISM and "protocol" not in res["ledger"]
    counts = res["tables"]["counts"]
    assert counts.height >= 10
    assert counts.filter(pl.col("query").str.starts_with("secret")).is_empty()
    from searchveil.release.counts import count_by

    per_share = (
        pl.concat(
            [
                count_by(Share.read(s, max_pairs=M).bounded, ["query", "url"], distinct_users=True)
                for s in shares
            ]
        )  # fmt: skip
        .group_by("query", "url")
        .agg(pl.col("count").sum())
    )
    union = count_by(bounded_pairs(read_log(shares[0].parent / "all.tsv"), M), ["query", "url"],
                     distinct_users=True)  # fmt: skip
    key = ["query", "url"]
    assert per_share.sort(key).equals(union.select(per_share.columns).sort(key))
    other = local_e2e(shares, COUNTS, rng=make_rng(SEED + 1))
    assert not other["tables"]["counts"].equals(counts)


def test_pooled_log_keeps_the_parties_users_apart(shares) -> None:
    log = read_log(shares[0])
    assert pooled_log([log, log]).n_users == 2 * log.n_users


def test_neighbour_audit_cels_local_e2e(shares, tmp_path) -> None:
    d_prime, _ = _without_rarest_user(shares, tmp_path / "dprime")
    for name, paths in (("a", shares), ("b", d_prime)):
        res = CliRunner().invoke(
            app, _cli("cels", "local", *sum((["--share", s] for s in paths), []), "--out",
                       tmp_path / name, "--epsilon", EPS, "--delta", DELTA, "--max-users",
                       MAX_USERS, "--max-pairs", M, *SIZES, "--seed", SEED, "--json"),
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        assert_only_public_files(tmp_path / name, PUBLIC)
        assert_provenance_beside(tmp_path / name)
        rows = sum(pl.read_csv(p, separator="\t").height for p in paths)
        assert_no_private_traces(tmp_path / name, paths, exact={"rows": rows})
        led = json.loads((tmp_path / name / "ledger.json").read_text())
        assert led["guarantee"]["counts_are_private"] is True
    assert_same_public_ledger(tmp_path / "a", tmp_path / "b", noisy=E2E_NOISY_FIELDS)


# -- parameters, records, help --------------------------------------------------------------------
def test_params_modes() -> None:
    assert CelsParams(epsilon=EPS, delta=DELTA, union_epsilon=EPS_U).schema == "input"
    p = CelsParams(epsilon=EPS, delta=DELTA, union_epsilon=EPS_U, schema="counts")
    assert p.mode == "e2e" and p.e2e().pairs == "zealous" and p.e2e().ids == "synthetic"
    assert p.to_dict()["mode"] == "e2e" and "key_bits" not in p.to_dict()
    assert p.pair_bound == 1 << 18 and p.published_pairs == 1000
    p3 = p.with_parties(3)
    assert p3.party_pairs == (1 << 18) + p3.union().per_party  # L: pairs and dummies
    assert CelsParams(epsilon=EPS, delta=DELTA, max_users=100, max_pairs=3,
                      union_epsilon=EPS_U).pair_bound == 300  # fmt: skip
    with pytest.raises(InvalidParameterError, match="parties"):
        p.cost()  # the noise shares depend on the number of parties
    assert p.with_parties(3).readers_cost().epsilon <= EPS * (1 + 1e-9)
    assert p.with_parties(3).cost().epsilon == pytest.approx(EPS + EPS_U)  # and P0's union view
    # ε_u is spent as stated, not ε: a smaller one costs less and adds more dummies
    half = CelsParams(epsilon=EPS, delta=DELTA, union_epsilon=EPS / 4, parties=3,
                      schema="counts")  # fmt: skip
    assert half.cost().epsilon == pytest.approx(EPS + EPS / 4)
    assert half.to_dict()["union_epsilon"] == EPS / 4 and half.party_pairs > p3.party_pairs
    c = CelsParams(epsilon=EPS, delta=0.3, objective="kl", mode="conditional")
    assert c.to_dict()["mode"] == "conditional" and "max_pairs" not in c.to_dict()
    assert c.with_parties(3) is c
    e2e_base = {"epsilon": EPS, "delta": DELTA, "union_epsilon": EPS_U, "schema": "counts"}
    inp = {"epsilon": EPS, "delta": DELTA, "union_epsilon": EPS_U, "max_query_pairs": MQ}
    cond_base = {"epsilon": EPS, "delta": DELTA, "mode": "conditional", "objective": "kl"}
    bad = [
        (e2e_base | {"objective": "kl"}, "objective"),  # e2e: no optimisation
        (e2e_base | {"key_bits": 512}, "key_bits"),
        (cond_base | {"max_pairs": 4}, "max-pairs"),
        (cond_base | {"max_party_pairs": 4}, "max-party-pairs"),
        (cond_base | {"union_epsilon": EPS_U}, "union-epsilon"),  # an e2e-only option
        (cond_base | {"objective": None}, "objective"),  # conditional: no default objective
        (e2e_base | {"mode": "joint"}, "mode"),
        (e2e_base | {"max_users": 1000, "delta": 0.01}, "delta"),  # δ ≥ 1/U
        (e2e_base | {"max_pairs": 0}, "max_pairs"),
        (e2e_base | {"max_party_pairs": 0}, "max-party-pairs"),
        (e2e_base | {"max_published_pairs": -1}, "max-published-pairs"),
        (e2e_base | {"split": (1.0, -1.0)}, "split"),
        (e2e_base | {"epsilon": 1e-5, "parties": 3}, "epsilon"),  # beyond the exact sampler
        (e2e_base | {"union_epsilon": None}, "union-epsilon"),  # required: no default ε_u
        (e2e_base | {"union_epsilon": None, "parties": 3}, "union-epsilon"),
        (e2e_base | {"union_epsilon": 0.0}, "union-epsilon"),
        (e2e_base | {"schema": "json"}, "schema"),
        (e2e_base | {"period": PERIOD}, "period"),  # options of the input's columns only
        (e2e_base | {"max_events": E}, "max-events"),
        (e2e_base | {"max_party_query_pairs": LQ}, "max-party-query-pairs"),
        (cond_base | {"schema": "input"}, "schema"),  # an e2e-only option
        (inp | {"period": "2006-03-31..2006-03-01"}, "period"),
        (inp | {"max_events": 4}, "max-events"),  # below S = 16
        (inp | {"max_party_query_pairs": 0}, "max-party-query-pairs"),
        (inp | {"epsilon": 0.01, "parties": 3}, "epsilon"),  # a statistic beyond the sampler
    ]
    for kw, name in bad:
        with pytest.raises(InvalidParameterError) as ei:
            CelsParams(**kw)
        assert ei.value.parameter.replace("_", "-") == name.replace("_", "-"), (kw, ei.value)
    with pytest.raises(InvalidParameterError):
        c.e2e()
    # the input's columns: two unions, half of ε_u each, the same total against P0; E capped
    # (not given) to what the exact Pólya sampler can draw — release ump's rule gives 1,024
    pi = CelsParams(**inp, parties=3)
    assert pi.cost().epsilon == pytest.approx(EPS + EPS_U) and pi.union().epsilon == EPS_U / 2
    assert pi.readers_cost().epsilon == pytest.approx(EPS)
    assert pi.query_party_pairs == pi.query_pair_bound + pi.query_union().per_party
    big = CelsParams(epsilon=1.0, delta=1e-7, max_users=10**6, union_epsilon=1.0,
                     max_query_pairs=MQ).e2e().statistics  # fmt: skip
    assert big is not None and big.max_events == 362 and "capped at 362" in big.max_events_rule


def _never(*_a: object, **_k: object) -> None:
    raise AssertionError("reached: a step after the parameters")


def test_cli_refuses_no_union_epsilon_before_reading_or_charging(shares, tmp_path, monkeypatch):
    """No default ε_u (the first rule: every ε spent is one the user stated): `cels run`, `cels
    party` and `cels local` in the e2e mode without --union-epsilon exit 2 with the message
    naming it, before any share is read (every later step fails the test), charge no budget
    and write nothing; the same command lines with it go on to those steps."""
    import searchveil.cli.cels as cli_cels
    from searchveil.cels.runner import write_config

    cfg = write_config(tmp_path / "tls", 3, timeout=5)
    for name in ("load_config", "check_run_paths", "run_local", "local_e2e", "run_spec"):
        monkeypatch.setattr(cli_cels, name, _never)
    monkeypatch.setattr(Share, "read", _never)
    book = tmp_path / "b.json"
    init = CliRunner().invoke(app, _cli("budget", "init", book, "--epsilon", 5, "--delta", 1e-4,
                                        "--relation", "user"))  # fmt: skip
    assert init.exit_code == 0, init.output
    before, files = book.read_bytes(), sorted(tmp_path.iterdir())
    two = sum((["--share", s] for s in shares[:2]), [])
    cmds = {
        "run": ["cels", "run", *two],
        "party": ["cels", "party", "--config", cfg, "--id", 1, "--share", shares[0]],
        "local": ["cels", "local", *two],
    }
    for cmd, args in cmds.items():
        base = [*args, "--out", tmp_path / cmd, "--epsilon", EPS, "--delta", DELTA,
                "--max-users", MAX_USERS, "--max-pairs", M, "--max-query-pairs", MQ,
                "--budget", book]  # fmt: skip
        res = CliRunner().invoke(app, _cli(*base))
        text = " ".join(res.output.split())
        assert res.exit_code == 2, (cmd, res.output)
        assert "invalid union-epsilon=None" in text and "required in --mode e2e" in text, cmd
        assert "reached" not in text, cmd
        assert book.read_bytes() == before and sorted(tmp_path.iterdir()) == files, cmd
        # the control: with --union-epsilon the command goes on to the next step
        res = CliRunner().invoke(app, _cli(*base, "--union-epsilon", EPS_U))
        assert "reached: a step after the parameters" in " ".join(res.output.split()), cmd


def test_python_entry_points_refuse_no_union_epsilon(shares, tmp_path, monkeypatch) -> None:
    """The Python entry points cannot be given an e2e parameter set without ε_u: it is
    refused where the parameters are built or read back (a party's spec), and parameters
    forced past that check are refused by `run_local`, the party runner and `cels local`'s
    function before any share is read or anything is written."""
    import copy
    import dataclasses

    import searchveil.cels.local as local_mod
    from searchveil.cels.party_main import PartySpec, params_from_json, params_to_json, run_spec
    from searchveil.cels.runner import write_config

    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        params_from_json(params_to_json(PARAMS) | {"union_epsilon": None})
    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        dataclasses.replace(PARAMS, union_epsilon=None)
    forced = copy.copy(PARAMS.with_parties(3))
    object.__setattr__(forced, "union_epsilon", None)
    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        forced.union()
    monkeypatch.setattr(local_mod, "read_log", _never)
    monkeypatch.setattr(Share, "read", _never)
    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        run_local(shares, forced, tmp_path / "run")
    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        local_e2e(shares, forced, rng=make_rng(1))
    cfg = write_config(tmp_path / "tls", 4, timeout=5)
    spec = PartySpec(config=cfg, me=1, params=forced, out=tmp_path / "party", share=shares[0])
    with pytest.raises(InvalidParameterError, match="union-epsilon=None"):
        run_spec(spec)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls"]


def test_a_share_above_the_public_bounds_is_refused_before_connecting(shares) -> None:
    """A share with more distinct bounded pairs (or query pairs) than L (L_q), or more users
    than U, or parameters for another number of parties: refused by the party itself before any
    connection (so no peer ever sees its exact figures in an error)."""
    from searchveil.cels.params import check_e2e_party

    small = dataclasses.replace(PARAMS, max_party_pairs=100)
    share = Share.for_params(shares[0], PARAMS)
    check_e2e_party(PARAMS.with_parties(3), share, 3)
    with pytest.raises(InvalidParameterError, match="max-party-pairs"):
        check_e2e_party(small.with_parties(3), share, 3)
    with pytest.raises(InvalidParameterError, match="max-party-query-pairs"):
        check_e2e_party(dataclasses.replace(PARAMS, max_party_query_pairs=10, parties=3), share, 3)
    with pytest.raises(InvalidParameterError, match="parties"):
        check_e2e_party(small.with_parties(2), None, 3)
    few = dataclasses.replace(PARAMS, delta=1e-4 / 2, max_users=100, parties=3)
    with pytest.raises(InvalidParameterError, match="max-users"):
        check_e2e_party(few, share, 3)


@pytest.mark.slow  # four processes started for a refusal: ~4 s
def test_cels_run_refuses_a_share_above_l(shares, tmp_path) -> None:
    res = CliRunner().invoke(
        app, _cli("cels", "run", *sum((["--share", s] for s in shares), []), "--out",
                   tmp_path / "o", "--epsilon", EPS, "--delta", DELTA, "--max-users", MAX_USERS,
                   "--max-pairs", M, "--max-party-pairs", 100, "--union-epsilon", EPS_U,
                   "--json"),
    )  # fmt: skip
    assert res.exit_code == 2 and "max-party-pairs" in res.output
    assert not (tmp_path / "o").exists()


def test_record_encoding_round_trips_and_rejects() -> None:
    from searchveil.cels.e2e_release import FIELD

    pairs = [("q", "u"), ("", ""), ("é" * 100, "x" * (PAIR_BYTES - 200)), ("a\x00", "\x00b")]
    rows = []
    for i, (q, u) in enumerate(pairs):
        r = 12345 + i
        rows.append([r, *((r * w) % FIELD for w in encode_pair(q, u))])
    rows.append([0] * len(rows[0]))  # a slot nobody holds
    got = decode_records(np.array(rows, dtype=np.uint64), 1)
    assert got == [*pairs, None]
    with pytest.raises(ValueError):
        encode_pair("x" * PAIR_BYTES, "y")
    two = [(a + b) % FIELD for a, b in zip(rows[0], rows[2], strict=True)]  # two pairs in one
    for bad in (two, [0, 1] + [0] * (len(rows[0]) - 2)):
        with pytest.raises(ProtocolError) as ei:
            decode_records(np.array([bad], dtype=np.uint64), 1)
        assert ei.value.peer == 1


def test_help_names_the_modes_and_the_budget() -> None:
    for cmd in ("run", "party", "local"):
        res = CliRunner().invoke(app, ["cels", cmd, "--help"], terminal_width=200)
        text = " ".join(res.output.split())
        assert "--mode" in text and "e2e" in text, cmd
        assert "not differentially private" in text.lower(), cmd
        assert "--max-party-pairs" in text and "--max-published-pairs" in text, cmd
        assert "--union-epsilon" in text and "ε_u (required, no default)" in text, cmd
        assert "default: ε" not in text and "default ε" not in text, cmd
        if cmd != "local":  # what P0 sees, and what --budget charges
            assert "(ε + ε_u, 2δ)" in text, cmd
    party = " ".join(CliRunner().invoke(app, ["cels", "party", "--help"],
                                        terminal_width=200).output.split())  # fmt: skip
    assert "--budget" in party and "P0 holds no data" in party


def test_party_p0_refuses_a_budget(tmp_path) -> None:
    from searchveil.cels.runner import write_config

    cfg = write_config(tmp_path / "tls", 3, timeout=5)
    res = CliRunner().invoke(app, _cli("cels", "party", "--config", cfg, "--id", 0, "--out",
                                       tmp_path / "o", "--epsilon", EPS, "--delta", DELTA,
                                       "--union-epsilon", EPS_U, "--max-query-pairs", MQ,
                                       "--budget", tmp_path / "b.json"))  # fmt: skip
    assert res.exit_code == 2 and "P0" in res.output and "no data" in res.output
    assert not (tmp_path / "o").exists()


def test_conditional_label_in_run_ledger_is_absent_in_e2e(joint) -> None:
    led = (joint["dir"] / "out" / "ledger.json").read_text()
    assert NOT_DP not in led and '"counts_are_private": true' in led


@pytest.mark.slow  # three `cels party` processes over loopback: ~10 s
def test_cels_party_charges_each_data_partys_own_budget(shares, tmp_path) -> None:
    """`cels party --budget` on P1 and P2 (two data parties; P0 without): each data party's
    own budget file is charged what P0 sees — the release's (ε, δ) and the union view's
    (ε_u, δ_u), ε_u as stated — and records its ledger; P0 charges nothing."""
    import subprocess
    import sys

    from searchveil.cels.runner import write_config

    cfg = write_config(tmp_path / "tls", 3, timeout=120)
    books = {}
    for k in (1, 2):
        books[k] = tmp_path / f"p{k}.budget.json"
        init = CliRunner().invoke(app, _cli("budget", "init", books[k], "--epsilon", 5,
                                            "--delta", 1e-4, "--relation", "user"))  # fmt: skip
        assert init.exit_code == 0, init.output
    procs = []
    for k in range(3):
        args = ["cels", "party", "--config", cfg, "--id", k, "--out", tmp_path / f"o{k}",
                "--epsilon", EPS, "--delta", DELTA, "--max-users", MAX_USERS, "--max-pairs", M,
                *SIZES, "--json"]  # fmt: skip
        if k:
            args += ["--share", shares[k - 1], "--budget", books[k]]
        procs.append(subprocess.Popen([sys.executable, "-m", "searchveil", *_cli(*args)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1][-2000:] for o in outs]
    led = json.loads((tmp_path / "o1" / "ledger.json").read_text())
    p0, readers = led["guarantee"]["against_p0"], led["guarantee"]["readers"]
    assert p0["epsilon"] == led["epsilon"] == pytest.approx(readers["epsilon"] + EPS_U)
    assert p0["delta"] == led["delta"] == pytest.approx(readers["delta"] + DELTA)
    for k in (1, 2):
        (charge,) = json.loads(books[k].read_text())["charges"]
        assert charge["state"] == "committed" and charge["what"] == f"cels party P{k}"
        assert charge["cost"]["epsilon"] == pytest.approx(p0["epsilon"])
        summary = json.loads(outs[k][0])
        assert summary["budget"]["left"]["epsilon"] == pytest.approx(5 - p0["epsilon"])
    assert json.loads(outs[0][0])["budget"] is None
