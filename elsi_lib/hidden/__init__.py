"""Hidden states: the target's replies (`replies`; `engine_replies` has vLLM write them), batched
forward passes (`forward`), the capture of per-layer block representatives Z (`capture`) into
`LayerStats` (`layerstats`), under one set of `CaptureSettings` (`settings`)."""
