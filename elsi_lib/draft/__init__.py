"""Drafts: EAGLE-3-style draft models conditioned on a chosen set of target layers, and how well they
draft.

`model`: the draft architecture (EAGLE-3, arXiv 2503.01840; vLLM's EAGLE-3 checkpoint layout);
`config`: what describes a draft, its target and its feature source (a layer set, or FINAL_NORM for
EAGLE-2's normed state);
`vocabulary`: its reduced vocabulary maps and the lm_head initialisation from the target.
`tree`: EAGLE-2 dynamic draft trees (arXiv 2406.16858) and accepted length / tau.
`corpus`, `features`, `train`, `checkpoints`: the training data (the target's replies, its hidden states),
training, and its resumable checkpoints.
`runner`: the draft's causal step-1 pass and its tree step, shared by `replay` (tau from recorded
sequences) and `decode` (the real speculative decoding loop, T = 0 and T > 0).
`cost`: what a draft buys in wall clock, the cost model of speculative decoding (measured by
bench/bench_cost.py and engines/cost_vllm.py); `linears`: a lever on it, the linears over a few rows
computed weight first (`weight_first_linears`, measured by bench/bench_linears.py and bench_cost.py).
`evidence`: what the project's trained drafts showed for a criterion (read from the committed results).
The experiments that train drafts on many layer sets and tabulate them are the study's (`elsi_lib.study`).
`export`: drafts in the speculators and EAGLE layouts that vLLM and speculators load, and back.
"""
