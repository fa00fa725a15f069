"""How interchangeable a family's layers are, the paper's explanation of why a layer choice is worth
more on one family than on another (Table 2 against Table 3): from a model's calibration Z alone,
the share of layer pairs whose linear CKA (Eq. 7) reaches a threshold, the mean off-diagonal CKA, and
the CKA compartments notebook 04 finds (Eq. 8 transition-score peaks); and, beside it, what the layer
choice was worth in that family's accepted-token table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .study import compartments

THRESHOLDS = (0.8, 0.9, 0.95)


def interchangeability(Z, thresholds=THRESHOLDS) -> dict:
    """One model's row: layers, the share of the N(N-1)/2 layer pairs with CKA >= each threshold,
    the mean off-diagonal CKA, the number of compartments and the largest one's share of the layers."""
    view = compartments(Z)
    M, N = view.cka, view.cka.shape[0]
    upper = M[np.triu_indices(N, k=1)]  # (N(N-1)/2,) every pair once
    edges = [0, *[int(b) + 1 for b in view.boundaries], N]  # a boundary l lies between layers l and l+1
    sizes = np.diff(edges)
    return {"layers": N, **{f"pairs with CKA >= {t:g}": float((upper >= t).mean()) for t in thresholds},
            "mean off-diagonal CKA": float(upper.mean()), "compartments": len(sizes),
            "largest compartment share": float(sizes.max() / N)}


def family_table(Zs: dict) -> pd.DataFrame:
    """{model: Z} -> one `interchangeability` row per model."""
    return pd.DataFrame([{"model": model, **interchangeability(Z)} for model, Z in Zs.items()])
