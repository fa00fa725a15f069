"""What comes in: the bundled models and their weights (`models`, `weights`), the prompt sets of
`../shared/data` and SpecBench (`prompts`, `readers`, `fetch_data`), and chat formatting (`chat`)."""
