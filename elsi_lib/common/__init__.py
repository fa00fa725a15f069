"""Small utilities every stage shares: cache files written atomically and keyed by content
(`cachefiles`), what identifies a model, tokenizer and library versions (`identity`), progress
bars (`progress`), argument checks (`checks`) and what the CPU runs fast (`hardware`)."""
