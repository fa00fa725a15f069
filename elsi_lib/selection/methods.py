"""Each selection method, declared once (engines: `engines`). The command's parser and its selection
dispatch, stability and the evidence read METHODS; a method not declared here is refused (`method`).

Adding a method: one `Method` in METHODS plus its code (a `choose` for a set chosen from the capture's
Z, a `fixed` rule for one fixed by the layer count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from . import select
from .conventions import eagle2_layers, eagle3_layers, eagle3_paper_layers
from .engines import engine


@dataclass(frozen=True)
class Method:
    """A selection method: its name on the command line, the other spellings users and the study use,
    what it reads ("capture": set entropy of Z, Eq. 4-6; "probe": the probe's statistics; "fixed": the
    layer count alone), the study's label for its drafts ("{m}" is the set size), the criterion its
    drafts are compared by in the evidence ("set entropy", "probe error", None), the options it takes,
    and how it chooses: `choose(Z, m, k_beam, k_expand, where)` -> (layers, score) or `fixed(n_layers)`."""

    name: str
    spellings: tuple[str, ...]
    reads: str
    label: str
    criterion: str | None
    options: tuple[str, ...] = ()
    choose: Callable | None = None
    fixed: Callable | None = None
    size: int | None = None  # a fixed method's set size, whatever the layer count
    rule: str | None = None  # a fixed method's rule, in words

    @property
    def measured(self) -> bool:
        """Whether its set comes from the capture (not from the layer count alone)."""
        return self.reads != "fixed"


def _beam(search):
    def choose(Z, m, k_beam, k_expand, where):
        found = search(Z, m, k_beam, k_expand, **where)
        return tuple(int(l) for l in found.layers), float(found.entropy)

    return choose


def _exhaustive(Z, m, k_beam, k_expand, where):
    found = select.exhaustive(Z, m, **where)
    return tuple(int(l) for l in found.layers), float(found.entropy)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("elsi", ("ELSI",), "capture", "ELSI m={m}", "set entropy", ("k_beam", "k_expand"), _beam(select.elsi)),
        Method(
            "elsi-c",
            ("elsi_c", "ELSI-C"),
            "capture",
            "ELSI-C m={m}",
            "set entropy",
            ("k_beam", "k_expand"),
            _beam(select.elsi_c),
        ),  # fmt: skip
        Method("exhaustive", (), "capture", "exhaustive m={m}", "set entropy", (), _exhaustive),
        Method("probe", ("task-probe",), "probe", "probe m={m}", "probe error", ("k_beam",)),
        Method(
            "eagle3",
            ("EAGLE3", "EAGLE-3"),
            "fixed",
            "EAGLE3",
            None,
            fixed=eagle3_layers,
            size=3,
            rule="EAGLE-3's rule [2, N//2, N-3]",
        ),
        Method(
            "eagle3-outputs",
            ("EAGLE3, paper's reading",),
            "fixed",
            "EAGLE3, paper's reading",
            None,
            fixed=eagle3_paper_layers,
            size=3,
            rule="EAGLE-3's rule [2, N//2, N-3] read as outputs of those layers",
        ),
        Method(
            "eagle2", ("EAGLE2", "EAGLE-2"), "fixed", "EAGLE2", None, fixed=eagle2_layers, size=1, rule="the last layer"
        ),
    )
}


def method(name: str) -> Method:
    """The method `name` (its name or one of its spellings, any capitals); ValueError naming the
    declared ones otherwise."""
    wanted = str(name).lower()
    for m in METHODS.values():
        if wanted == m.name or wanted in (s.lower() for s in m.spellings):
            return m
    raise ValueError(f"unknown method {name!r}: the methods are {', '.join(METHODS)}")


NO_ENGINE_DEFAULT = "eagle3"  # the set an answer without --engine is compared with: EAGLE-3's rule


class Default(NamedTuple):
    """What an engine uses when no layers are given: its default method's set (elsi's convention) and
    that method's rule in words."""

    layers: tuple[int, ...]
    rule: str


def default_of(engine_name: str | None, n_layers: int) -> Default:
    """The layers `engine_name` uses when none are given and the rule behind them; a ValueError for an
    undeclared engine or a model too shallow for the rule."""
    name = NO_ENGINE_DEFAULT if engine_name is None else engine(engine_name).default
    rule = METHODS[name].fixed
    assert rule is not None, f"an engine's default method must be a fixed one, not {name}"
    return Default(tuple(rule(n_layers)), METHODS[name].rule or METHODS[name].label)
