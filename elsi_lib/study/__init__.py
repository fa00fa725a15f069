"""The study: the paper's figures and tables and the accepted-token experiments on the bundled models.
It imports the core (inputs, hidden, selection, draft, common) and is never imported by it.

`calibration`, `study`, `claims`, `plots`: the calibration statistics, the figures' and Table 1's numbers,
the findings' claims and the plots; `protocol`, `experiment`, `methods`, `budget`, `curve`, `agreement`,
`tables`, `validation`, `families`, `draft_plots`: the drafts trained on every layer set (Tables 2-3), their
learning curves, the loop against replay, the tables and intervals, the criteria and the family comparison.
"""
