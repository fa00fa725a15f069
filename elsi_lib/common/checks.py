"""Checks of the arguments every math module takes: arrays, layer stacks, alpha, normalizations and
layer sets. Each raises a clear error before any work, naming what is wrong."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np

NORMALIZATIONS = ("none", "frobenius")
LayerSet = tuple[int, ...]  # sorted distinct layer indices, as `check_layers` returns them


def as_float64(X, name: str = "X", check_finite: bool = True) -> np.ndarray:
    """A float64 numpy array (no copy if it already is one) of a numpy array or torch tensor;
    non-finite values are an error unless check_finite=False (for callers that check later)."""
    if getattr(X, "is_complex", lambda: False)() or np.iscomplexobj(X):  # a torch.Tensor's or numpy's
        raise TypeError(f"{name} must be real; got complex values (their imaginary part would be dropped)")
    if np.ma.is_masked(X):  # np.asarray would use the masked entries as data
        raise ValueError(f"{name} has masked entries: fill them (X.filled(...)) or leave those rows out")
    if hasattr(X, "detach"):  # torch.Tensor, without importing torch
        X = X.detach().to("cpu").double().numpy()
    if np.asarray(X).dtype.kind in "USO":  # text (or objects) numpy would parse as numbers without a word
        raise TypeError(f"{name} must be numbers; got {np.asarray(X).dtype} values")
    array = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # a finite array whose sum overflows: checked in full
        suspect = check_finite and not np.isfinite(array.sum())
    if suspect and not np.all(np.isfinite(array)):  # one pass when finite
        raise ValueError(f"{name} contains NaN or Inf")
    return array


def as_layer_stack(Z, check_finite: bool = True) -> np.ndarray:
    """Validate layer representatives Z of shape (N, B, d) and return them as float64."""
    Z = as_float64(Z, "Z", check_finite)
    if Z.ndim != 3 or min(Z.shape) < 1:
        raise ValueError(f"Z must have shape (N layers, B rows, d features), got {Z.shape}")
    return Z


def check_alpha(alpha) -> float:
    """alpha as a float in (0, inf]; bools, strings and other non-numbers are a TypeError."""
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number > 0 (1 is Shannon, inf the min-entropy), got {alpha!r}")
    alpha = float(alpha)
    if not alpha > 0:  # NaN fails this too
        raise ValueError(f"alpha must be > 0 (1 is Shannon, inf the min-entropy), got {alpha}")
    return alpha


def check_normalize(normalize: str) -> str:
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    return normalize


def is_integer(value) -> bool:
    """A Python or numpy integer, and not a bool (True is no layer count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_layers(layers: Iterable[int], n_layers: int) -> LayerSet:
    """A sorted tuple of distinct layer indices in [0, n_layers); anything else is an error."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"a layer set must be an iterable of integer layer indices, got {layers!r}")
    layers = list(layers)
    if not layers:
        raise ValueError("a layer set must not be empty")
    for layer in layers:
        if not is_integer(layer):
            raise TypeError(f"layer indices must be integers, got {layer!r}")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range for {n_layers} layers (0..{n_layers - 1})")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layer set {layers} repeats a layer")
    return tuple(sorted(int(l) for l in layers))


def unique_keys(pairs: list) -> dict:
    """`json.loads(..., object_pairs_hook=unique_keys)`: a JSON object whose key appears twice is refused
    (json keeps the last one without a word)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def half_unit(value) -> float:
    """Half a unit of the last decimal a number is written with (its shortest repr): how far a rounding
    to that many decimals may have moved it; 0 for a number written with an exponent."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0.0
    decimals = text.split(".")[1]
    return 0.5 if decimals == "0" else 0.5 * 10.0 ** -len(decimals)


def ratio_holds(ratio: float, x: float, y: float, scale: float = 1.0) -> bool:
    """`ratio` is scale x x / y, each of ratio, x and y as rounded where written (`half_unit`)."""
    ex, ey, er = half_unit(x), half_unit(y), half_unit(ratio)
    low = scale * (x - ex) / (y + ey) - er
    high = scale * (x + ex) / max(y - ey, 1e-300) + er
    return low - 1e-9 <= ratio <= high + 1e-9
