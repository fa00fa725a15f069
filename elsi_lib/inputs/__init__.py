"""What comes in: the bundled models and their weights (`models`, `weights`), the prompt sets of
the pinned copies inside the package (`prompt_sets`, `data/prompts` in a checkout) and SpecBench (`prompts`, `readers`, `fetch_data`), and chat formatting (`chat`)."""
