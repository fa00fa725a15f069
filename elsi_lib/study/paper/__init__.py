"""The paper's measurements of the layers (Figs. 1-6, Table 1, the families) and the notebooks' runs."""
