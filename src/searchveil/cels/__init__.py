"""CELS — collaborative search-log sanitization (Hong et al., TKDE 2015): r parties holding
disjoint users' logs produce one joint same-schema release under the per-user constraints of
CELS Theorem 2, each party a separate process over mutual TLS. See docs/privacy/cels.md.

Modules: :mod:`.paillier` (additive HE, fixed-base obfuscators), :mod:`.commutative`
(commutative cipher on Curve25519's prime-order subgroup), :mod:`.precompute` (worker
processes), :mod:`.config` (parties.toml, certificates), :mod:`.wire` (framing, TLS mesh, liveness),
:mod:`.params` (``CelsParams``, ``Share``), :mod:`.protocol` (``run_party``: the phases of
:mod:`.union` (1–3), :mod:`.solve` (4–7) and :mod:`.output` (8–10) on :mod:`.party`'s state),
:mod:`.e2e` (the default mode's phases), :mod:`.e2e_release` and :mod:`.distributed` (its
release and its noise shared out among the parties), :mod:`.faults` (test hooks),
:mod:`.local` (``cels local``: the e2e release without the protocol, the LS baseline),
:mod:`.party_main` (one party
as a process, from a ``PartySpec``), :mod:`.runner` (``cels run``),
:mod:`.costs` (bandwidth/work model), :mod:`.reproduce`."""
