"""Privacy mechanisms: noise samplers with their privacy maps, thresholds and selection rules."""

from searchveil.mechanisms.noise import (
    DiscreteGaussian,
    DiscreteLaplace,
    discrete_gaussian,
    discrete_laplace,
)

__all__ = ["DiscreteGaussian", "DiscreteLaplace", "discrete_gaussian", "discrete_laplace"]
