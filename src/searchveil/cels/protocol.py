"""The CELS protocol (Hong et al., TKDE 2015, §4.2: Algorithms 1–3 and local sampling), one
party per process: P0 is the solver and data recipient, P1…Pr hold disjoint users' logs.

Two modes (``CelsParams.mode``). ``e2e`` (the default) runs the joint end-to-end DP release —
mesh, setup, union, sum, publish, output, then the input's columns (``--schema input``, the
default: query_union, query_sum, query_publish, query_output, shape, head, tables) or the
counts log's profile, and commit; its phases are in :mod:`.e2e` and :mod:`.e2e_schema`
(docs/privacy/cels.md §5). ``conditional`` is the paper's protocol below, NOT differentially
private (counts computed from the exact histogram), kept for reproducing its figures.

Phases of the conditional mode (each party runs :func:`run_party`; docs/privacy/cels.md has
the full analysis):

0. **mesh**, **setup** — TLS connections (:mod:`.wire`); P0 sends its Paillier public key (n and
   the fixed base h_s of the obfuscators) and the agreed parameters. From here every data party
   computes obfuscators under P0's key in worker processes (:mod:`.precompute`).
1. **union** — the pair universe by commutative encryption (Algorithm 3 applied to the hashed
   (query, url) pairs, on the prime-order subgroup of Curve25519, :mod:`.commutative`): each
   party's hashed pairs travel the ring P1→…→Pr→P1 and are encrypted by every party (order
   kept, so the owner can map its own pairs); the last hop carries 16-byte digests of the fully
   encrypted elements; every party sends its digest set to the coordinator P1, which
   broadcasts the sorted union. Universe positions are all the parties learn about other
   parties' pairs.
2. **sum** — Algorithm 1 as a masked ring sum: P1 adds a uniform 64-bit mask (CSPRNG) to its
   (count, holders) vector over the universe, P2…Pr add theirs, P1 removes the mask and sends
   every party the pairs J kept by Condition 1 (≥ 2 holders) and the optional paper cleaning
   (total count ≥ ``min_count``), with their total counts. (Same guarantee as Paillier under
   P1's key, which P1 alone could decrypt; see docs/privacy/cels.md §2.)
3. **rows** — each party builds its constraint rows (``constraint_block`` with the global
   totals), drops rows dominated by another of its rows (ℓ reduction) and announces m'_k.
4. **nlp** — Algorithm 2 (P0's Paillier key) *fixed*: line 6 raises a ciphertext to a
   ciphertext, which Paillier cannot do; each party knows A_k and T_k, computes A_kT_k in the
   clear, and only encrypts it (signed fixed point, packed). P1 encrypts its block, P2…Pr add
   theirs homomorphically along the ring; the permutation chain starts at Pr (which thereby
   re-randomises the sum before P1 sees it): Pr → P1 → … → Pr−1 → P0, each permuting the pair
   columns and re-randomising. Pr sends Enc(AB) to P0; each party sends A_kF_k to P0 in the
   clear (P0 decrypted it anyway).
5. **solve** — P0 decrypts (in worker processes), reduces ATx + AFy = (1−η)AB, y ≥ 0 to
   (AF)⁻¹: M̃x ≤ 1 − η and solves the KL (Appendix B) or size objective.
6. **unpermute** — x goes P0→Pr−1→…→P1→Pr, each applying its inverse permutation; Pr
   broadcasts x.
7. **verify** — every party checks *all* its users' constraints exactly (float64, no
   tolerance); a party whose user is over b repairs x (removing draws); x = min over parties.
8. **sample** — the global multinomial sampling, exactly: the x_i draws are split among the
   parties by sequential binomials along the ring (Pk draws Bin(t, c^k/R) with R the count
   not yet assigned), then each party samples its users (``sample_users``).
9. **output** — Algorithm 3 on the sampled records (invertible encoding, invertible scalars,
   shuffled at every hop), decrypted along the ring; Pr broadcasts the joint output.
10. **commit** — all parties exchange their statistics, build the same ledger, exchange the
    SHA-256 of (output, ledger) and write only if every digest agrees.

Failures (:mod:`.wire`): any peer that dies, stalls, aborts or sends a malformed or truncated
frame stops every party within seconds; the error names the peer, the phase and the cause, and
nothing is written.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from searchveil.cels.config import Config
from searchveil.cels.e2e_schema import SchemaPhases
from searchveil.cels.faults import inject_fault, parse_fault
from searchveil.cels.output import OutputPhases
from searchveil.cels.paillier import (
    PrivateKey,
    PublicKey,
)
from searchveil.cels.params import PRECOMPUTE, CelsParams, PartyResult, Share, check_e2e_party
from searchveil.cels.precompute import Precomputer
from searchveil.cels.solve import SolvePhases
from searchveil.cels.union import UnionPhases
from searchveil.cels.wire import (
    FAULT_KINDS,
    Mesh,
    ProtocolError,
    expect,
    why,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import (
    ReleaseWriter,
    build_provenance,
    write_json_atomic,
)
from searchveil.io.paths import TRANSCRIPT, Replace, Staging, check_private_path
from searchveil.release.ump.e2e import UmpMode
from searchveil.release.ump.kl import kl_loss
from searchveil.rng import RandomSource


class Party(SchemaPhases, UnionPhases, SolvePhases, OutputPhases):
    """One party of the protocol: the phases of :mod:`.union`, :mod:`.solve` and
    :mod:`.output` (``--mode conditional``) or of :mod:`.e2e` and :mod:`.e2e_schema`
    (``--mode e2e``) on the state of :class:`~searchveil.cels.party.PartyBase`."""

    def run(self) -> PartyResult:
        """Every phase of this party's mode, then the commit round."""
        if self.params.is_input:
            return self.commit([], tables=self.run_e2e_input())
        if self.params.mode == UmpMode.E2E:
            return self.commit([], tables=self.run_e2e())
        return self.commit(self.run_phases())

    def run_phases(self) -> list[str]:
        """Setup and every phase of this party, in order; returns the joint output's records
        (to commit)."""
        self.phase("setup")
        key = self.setup()
        if self.me == 0:
            assert isinstance(key, PrivateKey)
            self.phase("nlp")
            self.solve(key)
            self.phase("output")
            self.allow_output(self.recv_padded_length())
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            records = self._records_from(f)
        else:
            assert isinstance(key, PublicKey)
            self.phase("union")
            pos = self.union()
            self.phase("sum")
            keep, c_keep = self.secure_sum(pos)
            self.phase("rows")
            self.rows(pos, keep, c_keep)
            self.phase("nlp")
            self.nlp(key)
            self.phase("solve")
            fx = self.wait_x()
            self.phase("unpermute")
            x = self.unpermute(fx)
            self.phase("verify")
            x = self.verify(x)
            self.extra["output_size"] = int(x.sum())
            self.extra["kl_loss_of_counts"] = kl_loss(self.cJ, x) if x.size else None
            self.phase("sample")
            recs = self.sample(x)
            self.phase("output")
            records = self.output_union(recs)
        return records


class _Status:
    """The party's current phase and outcome in a small JSON file (for ``cels run``)."""

    def __init__(self, path: Path | None, me: int) -> None:
        self.path, self.me = path, me
        self.phase = "mesh"

    def write(self, state: str, **kw: Any) -> None:
        if self.path is None:
            return
        rec = {"party": self.me, "pid": os.getpid(), "phase": self.phase, "state": state,
               "time": time.time()} | kw  # fmt: skip
        try:
            write_json_atomic(self.path, rec)
        except OSError:  # pragma: no cover - the runner's directory vanished
            pass

    def failed(self, err: ProtocolError) -> str:
        """Record the failure (whom it blames, the cause, when it was seen); returns its text."""
        text = _failure_text(self.me, err)
        self.write("failed", peer=err.peer, cause=err.cause, error=text, detected_at=err.at)
        return text


def _failure_text(me: int, err: ProtocolError) -> str:
    blame = f" because of P{err.peer}" if err.peer is not None and err.peer != me else ""
    return f"P{me} stopped in phase '{err.phase}'{blame}: {err.cause}"


def run_party(
    config: Config,
    me: int,
    params: CelsParams,
    *,
    share: Share | None,
    out: Path | None,
    rng: RandomSource,
    transcript: Path | None = None,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    fault: str | None = None,
    workers: int = 0,
    precompute: int = PRECOMPUTE,
    status: Path | None = None,
    hard_exit: bool = False,
    provenance: Path | None = None,
) -> PartyResult:
    """Run party ``me`` to completion; writes ``out`` (atomically: ``log.tsv`` and the public
    ``ledger.json``) and this party's private provenance record (``provenance``, by default
    ``<out>.private.json`` beside it) only if every party agrees, and ``transcript``
    (owner-only permissions) only then too. Any failure sends ``abort`` to
    all peers and raises :class:`ProtocolError` naming the phase, the peer and the cause.

    ``workers``: processes computing obfuscators / decryptions ahead (0 = inline);
    ``hard_exit``: end the process if the main thread does not stop within seconds of a
    failure (the CLI sets it); ``fault``: test hook (see :func:`inject_fault`)."""
    if (me == 0) != (share is None):
        raise InvalidParameterError("share", share, "a share for P1…Pr, none for P0")
    check_e2e_party(params, share, len(config.ids) - 1)  # before any connection
    inputs = [("share", share.info.get("path"))] if share is not None else []
    _check_outputs(out, transcript, overwrite=overwrite, provenance=provenance, inputs=inputs)
    flt = parse_fault(fault)
    st = _Status(status, me)
    # the transcript is written into a staging directory beside it, renamed into place only
    # if the run succeeds; a crash leaves a marked staging directory the next run removes
    trule = Replace("transcript", overwrite, TRANSCRIPT)  # again at the swap
    staged = (
        Staging(transcript, directory=False, private=True, replace=trule) if transcript else None
    )

    def on_phase(name: str) -> None:
        st.phase = name
        st.write("running")
        if progress is not None:
            progress(name)

    # forks now, before any thread exists (the e2e mode encrypts nothing under P0's key)
    precomp = Precomputer(workers if params.mode == UmpMode.CONDITIONAL else 0)
    on_phase("mesh")
    try:
        try:
            result = _run_in_mesh(
                config, me, params, share, rng, fault=flt, precomp=precomp, progress=on_phase,
                precompute=precompute, transcript=staged.path if staged is not None else None,
                on_stuck=_watchdog(st, staged) if hard_exit else None,
            )  # fmt: skip
        except ProtocolError as exc:
            if exc.phase is None:
                exc.phase = st.phase
            st.phase = exc.phase  # where it failed (the status may already show the next phase)
            st.failed(exc)
            raise PartyFailed(me, exc) from exc
        except BaseException as exc:
            st.write("failed", peer=me, cause=why(exc), error=f"P{me} crashed: {why(exc)}")
            raise
        finally:
            precomp.close()
        if out is not None:
            with ReleaseWriter(out, overwrite=overwrite, provenance=provenance,
                               inputs=inputs) as w:  # fmt: skip
                write_party_release(w, result, share)
        if staged is not None:
            staged.commit()
    finally:
        if staged is not None:
            staged.discard()
    st.phase = "done"
    st.write("done")
    return result


def _check_outputs(
    out: Path | None, transcript: Path | None, *, overwrite: bool, provenance: Path | None,
    inputs: list[tuple[str, Any]],
) -> None:  # fmt: skip
    """Fail before any connection if the release or its provenance record would be refused, or
    the transcript (private) would land inside a release directory (issue 30) or replace a
    file that is no transcript (issue 39: only with ``overwrite``, only a CELS transcript)."""
    if out is not None:
        ReleaseWriter(out, overwrite=overwrite, provenance=provenance, inputs=inputs)
    if transcript is not None:
        check_private_path(
            transcript, option="transcript", releases=[out] if out else [], inputs=inputs,
            overwrite=overwrite, owned=TRANSCRIPT,
        )  # fmt: skip


def _run_in_mesh(
    config: Config,
    me: int,
    params: CelsParams,
    share: Share | None,
    rng: RandomSource,
    *,
    fault: tuple[str, str, int | None] | None,
    precomp: Precomputer,
    progress: Callable[[str], None],
    precompute: int,
    transcript: Path | None,
    on_stuck: Callable[[ProtocolError], None] | None,
) -> PartyResult:
    """Connect the mesh and run every phase of party ``me``; on a failure every peer gets an
    ``abort`` naming the party at fault and a :class:`ProtocolError` (the mesh's own failure
    if there is one: it explains the others) is raised."""
    if fault is not None and fault[0] == "mesh" and fault[1] in ("crash", "kill", "stop"):
        inject_fault(None, fault[1], fault[2])
    mesh_fault = (
        (fault[1], fault[2]) if fault and fault[0] == "mesh" and fault[1] in FAULT_KINDS else None
    )
    with Mesh(config, me, transcript=transcript, on_stuck=on_stuck,
              mesh_fault=mesh_fault) as mesh:  # fmt: skip
        precomp.check = mesh.check
        party = Party(
            mesh, params, share, rng, precomp=precomp, progress=progress,
            fault=fault if fault and fault[0] != "mesh" else None, precompute=precompute,
        )  # fmt: skip
        try:
            return party.run()
        except (ProtocolError, InputFormatError, InvalidParameterError) as exc:
            err = _as_protocol_error(exc, mesh)
            text = _failure_text(me, err)
            mesh.abort(text, culprit=err.peer if err.peer is not None else me)
            raise ProtocolError(err.cause, peer=err.peer, phase=err.phase, at=err.at) from exc
        except BaseException as exc:
            mesh.abort(f"P{me} crashed in phase '{mesh.phase}': {why(exc)}", culprit=me)
            raise


def _watchdog(st: _Status, staged: Staging | None) -> Callable[[ProtocolError], None]:
    """What the mesh calls when the main thread does not stop within seconds of a failure:
    record it, drop the partial transcript and end the process (exit 2)."""

    def stuck(err: ProtocolError) -> None:  # pragma: no cover - runs in a subprocess
        text = st.failed(err)
        if staged is not None:
            staged.discard()
        sys.stderr.write(f"error: {text} (stopped by the watchdog)\n")
        sys.stderr.flush()
        os._exit(2)

    return stuck


def write_party_release(w: ReleaseWriter, result: PartyResult, share: Share | None) -> None:
    """The joint release's tables, the public ledger and this party's provenance record."""
    for name, table in (result.tables or {"log": result.output}).items():
        w.write_table(name, table)
    w.write_ledger(result.ledger)
    w.write_provenance(party_provenance(share, result.stats))


def party_provenance(share: Share | None, stats: dict[str, Any]) -> dict[str, Any]:
    """This party's private provenance record: its input file and its figures of the run."""
    return build_provenance(
        inputs=[share.info] if share is not None else [],
        report={"cels_party": stats},
        extra={"mechanism": "cels", "party": stats.get("party")},
    )


class PartyFailed(ProtocolError):
    """:class:`ProtocolError` as reported by one party: ``P1 stopped in phase 'union' because
    of P2: …``."""

    def __init__(self, party: int, err: ProtocolError) -> None:
        super().__init__(err.cause, peer=err.peer, phase=err.phase, at=err.at)
        self.party = party
        self.args = (_failure_text(party, err),)

    def __str__(self) -> str:
        return str(self.args[0])


def _as_protocol_error(exc: BaseException, mesh: Mesh) -> ProtocolError:
    """The error to report: the mesh's failure if there is one (it explains the others)."""
    f = mesh.failure
    if f is not None:
        return ProtocolError(f.cause, peer=f.peer, phase=f.phase, at=f.at)
    if isinstance(exc, ProtocolError):
        return ProtocolError(exc.cause, peer=exc.peer, phase=exc.phase or mesh.phase, at=exc.at)
    return ProtocolError(str(exc), peer=None, phase=mesh.phase)
