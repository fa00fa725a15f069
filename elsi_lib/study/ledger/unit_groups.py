"""Which owed units a ledger run trains together: a lock-step group of consecutive owed units of one
seed, as many as fit the minutes left, since one target forward, greedy token and soft targets feed every draft of
a group and each draft only adds its own training step (`train.train_drafts`; a draft trained in a
group is bit-identical to the same draft trained alone, tests/test_draft_agreement.py, so its record
is the same either way).

Pure planning, no model: `UnitCost` is what the ledger's calibration measured on this machine,
`next_group` picks the group. A group cut by the end of a sitting loses every draft in it on a new
machine, so a group of two or more is planned with `GROUP_MARGIN`. A group resumes only from its
own checkpoint (the key holds every draft's set), so the planner first looks for a checkpoint of a
group this protocol already started: one a record names (`recorded_groups`: training finished, some
drafts not yet evaluated) or one of the owed units' ledger-order prefixes (cut mid-training).
"""

from __future__ import annotations

from dataclasses import dataclass

# The first unit of the 2026-12-05 morning sitting on table2_strong was calibrated at 52.3 min and
# took 61.1 (1.17x): a group's estimate (from the calibration, or rescaled by the sitting's last group)
# must fit the minutes left with this much to spare, since a cut group loses every draft in it.
GROUP_MARGIN = 1.25
MAX_GROUP = 4  # drafts in one group: each holds its weights and AdamW state (Qwen's: about 0.5 GB)


@dataclass(frozen=True)
class UnitCost:
    """Seconds on this machine: `shared_s` a group's training pays once (the target's forward, its
    greedy token, the soft targets), `draft_s` each draft adds to it (its training steps), `rest_s`
    each draft's held-out accuracy and replay after training."""

    shared_s: float
    draft_s: float
    rest_s: float

    def training(self, drafts: int) -> float:
        return self.shared_s + drafts * self.draft_s

    def seconds(self, drafts: int, evaluated: int, share: float = 0.0) -> float:
        """A group of `drafts` whose training is `share` done, then `evaluated` of them evaluated."""
        return (1.0 - share) * self.training(drafts) + evaluated * self.rest_s

    def measured(self, drafts: int, trained_s: float, rest_s: float | None) -> "UnitCost":
        """This cost rescaled by a group's measured training (`trained_s`: all of it, this sitting's
        and the checkpoint's on this machine) and measured rest per draft: the next plan's."""
        planned = self.training(drafts)
        scale = trained_s / planned if planned > 0 and trained_s > 0 else 1.0
        return UnitCost(self.shared_s * scale, self.draft_s * scale, self.rest_s if rest_s is None else rest_s)


@dataclass(frozen=True)
class GroupPlan:
    """One lock-step group: its seed, its drafts (ledger order), those of them still owed a record,
    the share of its training this machine's checkpoint holds and the seconds it took, its estimate,
    and whether the estimate fits the minutes left."""

    seed: int
    ids: tuple
    owed: tuple
    share: float
    seconds_before: float
    need_s: float
    fits: bool


def next_group(
    owed: list, cost: UnitCost, left_s: float, trained, recorded_groups=(), max_group: int = MAX_GROUP
) -> GroupPlan | None:
    """The next group to train among `owed` ([(method id, seed)] in ledger order, every id one of
    the protocol's methods): from the leading owed units of the first one's seed (never a unit past
    one of another seed: the ledger's order holds). `trained(ids, seed)` -> (share done, seconds) of
    that group's checkpoint here; `recorded_groups`: [(ids, seed)] the protocol's records name. A
    started group (share > 0) is resumed whether or not it fits (a plan that does not fit says so);
    otherwise the largest group of at most `max_group` whose estimate fits (GROUP_MARGIN for two or
    more); a single unit that does not fit is returned with fits False. None when nothing is owed."""
    if not owed:
        return None
    seed = owed[0][1]
    mine = []
    for m, s in owed:
        if s != seed:
            break
        mine.append(m)
    owed_of_seed = {m for m, s in owed if s == seed}
    candidates = [tuple(ids) for ids, s in recorded_groups if s == seed and set(ids) & owed_of_seed]
    candidates += [tuple(mine[:k]) for k in range(min(len(mine), max_group), 0, -1)]
    for ids in dict.fromkeys(candidates):
        share, before = trained(ids, seed)
        if share > 0:
            todo = tuple(m for m in ids if m in owed_of_seed)
            need = cost.seconds(len(ids), len(todo), share)
            return GroupPlan(seed, ids, todo, share, before, need, need <= left_s)
    for k in range(min(len(mine), max_group), 0, -1):
        need = cost.seconds(k, k)
        if need * (GROUP_MARGIN if k > 1 else 1.0) <= left_s or k == 1:
            ids = tuple(mine[:k])
            return GroupPlan(seed, ids, ids, 0.0, 0.0, need, need <= left_s)
    raise AssertionError("unreachable: k == 1 always returns")


def describe(plan: GroupPlan) -> str:
    """One line: the group, its seed and its estimate."""
    what = plan.ids[0] if len(plan.ids) == 1 else f"{len(plan.ids)} drafts in lock-step ({', '.join(plan.ids)})"
    also = "" if plan.owed == plan.ids else f", evaluating {', '.join(plan.owed)}"
    resumed = f", resuming at {plan.share:.0%}" if plan.share else ""
    return f"{what} seed {plan.seed}{resumed}{also}: about {plan.need_s / 60:.0f} min"
