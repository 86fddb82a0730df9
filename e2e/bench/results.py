"""One benchmark result: a JSON line for machines and a table row for people."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Result:
    name: str
    value: float
    unit: str
    budget: str  # e.g. "<= 5", ">= 100", "" when none
    baseline: float | None = None  # measured in the same run, same unit
    baseline_name: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return round(self.value / self.baseline, 3)

    @property
    def within(self) -> bool | None:
        if not self.budget:
            return None
        op, limit = self.budget.split()
        return self.value <= float(limit) if op == "<=" else self.value >= float(limit)

    def line(self) -> str:
        data = asdict(self) | {"ratio": self.ratio, "within_budget": self.within}
        return json.dumps(data)


def report(results: list[Result], out: str | None = None) -> None:
    lines = [r.line() for r in results]
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
    for line in lines:
        print(line)
    print(file=sys.stderr)
    header = ("benchmark", "value", "unit", "budget", "baseline", "ratio", "ok")
    rows = [header] + [
        (r.name, f"{r.value:.3f}", r.unit, r.budget or "-",
         f"{r.baseline:.3f} ({r.baseline_name})" if r.baseline is not None else "-",
         f"{r.ratio}" if r.ratio is not None else "-",
         {True: "yes", False: "NO", None: "-"}[r.within]) for r in results]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)), file=sys.stderr)
