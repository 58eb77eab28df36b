"""Noise for releases: CSPRNG, exact integer samplers, and grid-based DP mechanisms.

Imports nothing from dpsql but :mod:`dpsql.errors`, and no sqlglot.
"""
from dpsql.noise.mechanisms import (
    AnalyticGaussian,
    Gaussian,
    Laplace,
    analytic_gaussian_sigma,
    gaussian_delta,
    make_mechanism,
)
from dpsql.noise.rng import Rng, SecureRng, SeededRng, new_salt
from dpsql.noise.samplers import bernoulli_exp, discrete_gaussian, discrete_laplace

__all__ = [
    "AnalyticGaussian",
    "Gaussian",
    "Laplace",
    "Rng",
    "SecureRng",
    "SeededRng",
    "analytic_gaussian_sigma",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "gaussian_delta",
    "make_mechanism",
    "new_salt",
]
