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
    "Rng", "SecureRng", "SeededRng", "new_salt",
    "bernoulli_exp", "discrete_laplace", "discrete_gaussian",
    "Laplace", "Gaussian", "AnalyticGaussian", "make_mechanism",
    "analytic_gaussian_sigma", "gaussian_delta",
]
