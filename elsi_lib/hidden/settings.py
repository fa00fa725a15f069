"""Capture settings: the one home of rho, B, max_length and the position selection (paper Sec. 4.1-4.2).

`capture`, `capture_variants`, the calibration study and the cache key all read a `CaptureSettings`;
its defaults are the paper's. Invalid values fail when the settings are built, not mid-capture.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Union

EXCLUDE_MODES = ("none", "first", "template")
SELECT_MODES = ("entropy", "random")
ON_LONG = ("truncate", "error")
Exclude = Union[str, Callable[[int, int, bool], bool]]


@dataclass(frozen=True)
class CaptureSettings:
    """What decides a capture's result (everything else only decides how fast it runs).

    rho: fraction of each sample's eligible positions kept (Eq. 10; 1 keeps all).
    block: B, the rows of each layer representative Z (Eq. 11).
    max_length: tokens per conversation at most; a longer one keeps its first max_length tokens
        (`on_long="truncate"`, counted) or is an error (`on_long="error"`).
    exclude: "none" (the paper), "first" (position 0), "template" (every token the chat template
        adds) or a predicate (position, token_id, is_template) -> bool, True for positions to leave
        out (a predicate cannot be cached).
    select: "entropy" (the paper's top rho by token entropy) or "random" (the same number of
        positions, seeded: a control).
    keep_samples: also keep each sample's block sum (for bootstrapping over prompts).
    seed: seeds `select="random"`.
    """

    rho: float = 0.3
    block: int = 32
    max_length: int = 1024
    exclude: Exclude = "none"
    select: str = "entropy"
    keep_samples: bool = False
    on_long: str = "truncate"
    seed: int = 0

    # fields one forward pass can vary per variant; the rest are shared by a pass
    PER_VARIANT = ("rho", "exclude", "select", "keep_samples")

    def __post_init__(self):
        if isinstance(self.rho, bool) or not isinstance(self.rho, (int, float)) or not 0 < self.rho <= 1:
            raise ValueError(f"rho must lie in (0, 1], got {self.rho!r}")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 2:
            raise ValueError(f"block must be an integer >= 2, got {self.block!r}")
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 2:
            raise ValueError(f"max_length must be an integer >= 2, got {self.max_length!r}")
        if self.block > self.max_length:
            raise ValueError(
                f"block {self.block} exceeds max_length {self.max_length}: a sample keeps at most max_length "
                "tokens, so no block could fill"
            )
        if not (callable(self.exclude) or self.exclude in EXCLUDE_MODES):
            raise ValueError(f"exclude must be one of {EXCLUDE_MODES} or a predicate, got {self.exclude!r}")
        if self.select not in SELECT_MODES:
            raise ValueError(f"select must be one of {SELECT_MODES}, got {self.select!r}")
        if not isinstance(self.keep_samples, bool):
            raise ValueError(f"keep_samples must be True or False, got {self.keep_samples!r}")
        if self.on_long not in ON_LONG:
            raise ValueError(f"on_long must be one of {ON_LONG}, got {self.on_long!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def replace(self, **changes) -> "CaptureSettings":
        """A copy with `changes`; an unknown name is an error that lists the known ones."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(
                f"unknown capture setting(s) {sorted(unknown)}; use {[f.name for f in dataclasses.fields(self)]}"
            )
        return dataclasses.replace(self, **changes)

    @property
    def cacheable(self) -> bool:
        return isinstance(self.exclude, str)

    def key(self) -> dict:
        """The settings as cache-key fields (keep_samples only when set, as the cache always had)."""
        key = {
            "rho": self.rho,
            "block": self.block,
            "max_length": self.max_length,
            "select": self.select,
            "exclude": self.exclude
            if isinstance(self.exclude, str)
            else f"predicate:{getattr(self.exclude, '__qualname__', '?')}",
            "on_long": self.on_long,
            "seed": self.seed,
        }
        if self.keep_samples:
            key["keep_samples"] = True
        if self.exclude == "template":  # 2: messages located by the template's own rendering (`chat.content_spans`)
            key["template_mask"] = 2
        return key
