"""Shared fixtures: small random layer stacks, tiny random models, and the bundled real model
(loaded once per test session)."""
from __future__ import annotations

import numpy as np
import pytest


def random_layers(n_layers=8, rows=6, dim=10, seed=0, shared=3.0) -> np.ndarray:
    """Z (N, B, d): Gaussian layers sharing one mean direction, with scales that vary by layer."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=(1, 1, dim))
    scale = rng.uniform(0.5, 3.0, size=(n_layers, 1, 1))
    return scale * (shared * direction + rng.normal(size=(n_layers, rows, dim)))


@pytest.fixture
def Z():
    return random_layers()


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled SmolLM2, converted on first use and cached."""
    from elsi_lib import load_model

    return load_model()
