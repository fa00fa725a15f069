"""Hidden states: the target's replies (`replies`; `engine_replies` has vLLM write them, in the
engines' own environment, `engine_env`; `reply_records` checks their archive), batched
forward passes (`forward`), the capture of per-layer block representatives Z (`capture`, its per-sample sums `accumulate`) into
`LayerStats` (`layerstats`), under one set of `CaptureSettings` (`settings`)."""
