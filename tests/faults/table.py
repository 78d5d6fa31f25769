"""The fault suite's table: one row per fault, printed and written to test-artifacts/faults/table.md."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACT = REPO / "test-artifacts" / "faults" / "table.md"

COLUMNS = (
    "fault",
    "tasks",
    "succeeded",
    "kickoffs seen",
    "duplicates",
    "lost waits",
    "Airflow retries",
    "wall time",
    "expected and seen",
    "verdict",
)


@dataclass
class Row:
    fault: str
    tasks: int | str = "-"
    succeeded: int | str = "-"
    kickoffs: int | str = "-"
    duplicates: int | str = "-"
    lost: int | str = "-"
    retries: int | str = "-"
    seconds: float | None = None
    note: str = ""
    verdict: str = "ok"

    def cells(self) -> list[str]:
        wall = "-" if self.seconds is None else f"{self.seconds:.0f} s"
        return [
            self.fault,
            str(self.tasks),
            str(self.succeeded),
            str(self.kickoffs),
            str(self.duplicates),
            str(self.lost),
            str(self.retries),
            wall,
            self.note,
            self.verdict,
        ]


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    header_note: str = ""

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        self.write()
        return row

    def render(self) -> str:
        lines = [
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "|".join("---" for _ in COLUMNS) + "|",
        ]
        for row in self.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row.cells()) + " |")
        total = time.monotonic() - self.started
        lines.append("")
        lines.append(
            f"Suite wall time so far: {total:.0f} s (Airflow {self.airflow_version()}, Python "
            f"{platform.python_version()}, {self.header_note})"
        )
        return "\n".join(lines)

    @staticmethod
    def airflow_version() -> str:
        from importlib.metadata import version

        return version("apache-airflow-core")

    def write(self) -> None:
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT.write_text("# Fault suite (tests/faults)\n\n" + self.render() + "\n")


TABLE = Table()
