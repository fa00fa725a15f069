"""The accepted-token experiments: drafts trained on many layer sets, scored by replay, tabulated."""
