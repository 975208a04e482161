"""CELS — collaborative search-log sanitization (Hong et al., TKDE 2015): r parties holding
disjoint users' logs produce one joint same-schema release under the per-user constraints of
CELS Theorem 2, each party a separate process over mutual TLS. See docs/privacy/cels.md.

Modules: :mod:`.paillier` (additive HE, fixed-base obfuscators), :mod:`.commutative`
(commutative cipher on Curve25519's prime-order subgroup), :mod:`.precompute` (worker
processes), :mod:`.wire` (framing, TLS mesh, liveness), :mod:`.protocol` (Algorithms 1–3 +
local sampling), :mod:`.local` (the LS baseline), :mod:`.runner` (``cels run``),
:mod:`.costs` (bandwidth/work model), :mod:`.reproduce`."""
