"""Same-schema release of Hong et al., EDBT 2012 (O-UMP, F-UMP, D-UMP, SPE) — see
``docs/privacy/ump.md``. Pipeline: histogram → constraints (:mod:`.constraints`) →
objective/solver (:mod:`.solvers`) → counts → sampler (:mod:`.sampling`) → writer
(:func:`searchveil.release.write_release`), each replaceable (CELS adds a KL objective and
multi-party constraint blocks). Metrics in :mod:`.metrics`; the EDBT reproduction in
:mod:`.reproduce`."""

from searchveil.release.ump.constraints import (
    UmpInput,
    constraint_block,
    constraint_matrix,
    preprocess,
    privacy_bound,
    stack_blocks,
    user_loads,
)
from searchveil.release.ump.metrics import ump_metrics
from searchveil.release.ump.release import UmpObjective, UmpParams, release_ump
from searchveil.release.ump.reproduce import reproduce_tables
from searchveil.release.ump.sampling import sample_users, sampled_log
from searchveil.release.ump.solvers import (
    Solution,
    lp_relaxation,
    solve_dump,
    solve_fump,
    solve_oump,
)

__all__ = [
    "UmpInput",
    "UmpObjective",
    "UmpParams",
    "Solution",
    "constraint_block",
    "constraint_matrix",
    "preprocess",
    "privacy_bound",
    "release_ump",
    "sample_users",
    "sampled_log",
    "solve_dump",
    "solve_fump",
    "solve_oump",
    "lp_relaxation",
    "stack_blocks",
    "ump_metrics",
    "user_loads",
    "reproduce_tables",
]
