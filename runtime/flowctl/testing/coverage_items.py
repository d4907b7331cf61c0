"""What flow coverage counts (:mod:`flowctl.testing.coverage`): the three kinds of item, one
:class:`Item` per transition rule, handler or error edge, and a flow's :class:`FlowCoverage`
figures ``(covered, total, percent)``; ``--min-coverage`` gates :data:`GATED`."""
from __future__ import annotations

from dataclasses import dataclass, field

TRANSITIONS, HANDLERS, EDGES = "transitions", "handlers", "error edges"
GATED = (TRANSITIONS, HANDLERS)


@dataclass
class Item:
    kind: str            # transitions | handlers | error edges
    key: tuple
    label: str
    where: str
    source: str          # the state it leaves (or where a flow handler is caught: "*")
    target: str | None = None
    covered_by: list = field(default_factory=list)

    @property
    def covered(self) -> bool:
        return bool(self.covered_by)


@dataclass
class FlowCoverage:
    flow: str
    items: dict          # kind -> [Item]
    cases: int = 0

    def figure(self, kind: str) -> tuple[int, int, float]:
        items = self.items[kind]
        done = sum(i.covered for i in items)
        return done, len(items), (100.0 * done / len(items) if items else 100.0)

    def uncovered(self, kinds=(TRANSITIONS, HANDLERS, EDGES)) -> list:
        return [i for k in kinds for i in self.items[k] if not i.covered]

    def below(self, minimum: float) -> list:
        """``[(kind, percent)]`` of the gated figures under ``minimum``."""
        return [(k, self.figure(k)[2]) for k in GATED if self.figure(k)[2] + 1e-9 < minimum]

    def as_dict(self) -> dict:
        return {"flow": self.flow, "cases": self.cases,
                **{k.replace(" ", "_"): {"covered": self.figure(k)[0], "total": self.figure(k)[1],
                                         "percent": round(self.figure(k)[2], 1),
                                         "uncovered": [i.label for i in self.items[k] if not i.covered]}
                   for k in self.items}}
