"""The study: the paper's figures and tables, the accepted-token experiments on the bundled models, the
ledger of trained drafts and the pages made from them. It imports the core (inputs, hidden, selection,
draft, common) and is never imported by it; of it, the command reads only the evidence file that
`ledger.evidence_file` writes.

`paper`        the layers' measurements (Figs. 1-6, Table 1, the families), the calibration captures, the
               findings' claims, the figures, and the notebooks' runs (`notebook_runs`, the Makefile's)
`experiments`  drafts trained alike on every layer set and scored by replay (Tables 2-3): settings, data,
               layer choices, learning curves, the loop against replay, tau tables, criteria against drafts
`ledger`       protocols and their units, one record per trained draft, the runs that train owed units,
               the tables, seed-level comparisons and the evidence file made from the records
`pages`        the documentation site and the wall-clock pages, generated from the committed results
"""
