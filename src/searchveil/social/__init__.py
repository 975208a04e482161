"""Private social recommendations (Korolova 2012 thesis, chapter 5).

Utilities and their edge sensitivity (:mod:`.utility`), ε-DP recommenders with exact samplers
(:mod:`.mechanisms`), exact expected accuracy and the Corollary 1 bound (:mod:`.accuracy`),
the release with its ledger (:mod:`.recommend`) and the §5.5 experiments (:mod:`.experiments`).
"""

from searchveil.social.accuracy import (
    corollary1,
    exponential_accuracy,
    laplace_accuracy,
    node_bound,
    permute_and_flip_accuracy,
    smoothing_accuracy,
)
from searchveil.social.experiments import ExperimentConfig, run_experiments, social_report
from searchveil.social.mechanisms import (
    ExponentialMechanism,
    LaplaceArgmax,
    MechanismName,
    PermuteAndFlip,
    SmoothedSampling,
    make_mechanism,
)
from searchveil.social.recommend import recommend, release_recommendations
from searchveil.social.utility import (
    CommonNeighbours,
    TargetUtilities,
    UtilityName,
    WeightedPaths,
    target_utilities,
    utility_from_name,
)

__all__ = [
    "CommonNeighbours",
    "ExperimentConfig",
    "ExponentialMechanism",
    "LaplaceArgmax",
    "MechanismName",
    "PermuteAndFlip",
    "SmoothedSampling",
    "TargetUtilities",
    "UtilityName",
    "WeightedPaths",
    "corollary1",
    "exponential_accuracy",
    "laplace_accuracy",
    "make_mechanism",
    "node_bound",
    "permute_and_flip_accuracy",
    "recommend",
    "release_recommendations",
    "run_experiments",
    "smoothing_accuracy",
    "social_report",
    "target_utilities",
    "utility_from_name",
]
