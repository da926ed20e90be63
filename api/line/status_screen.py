"""`omni line --status`: a running line's `/status` JSON drawn as one screen of text (rich tables).

Knows nothing of how the figures were gathered; only the snapshot's keys (`api.line.stats.LineStats.snapshot`).
"""
from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table


def status_screen(snapshot: dict[str, Any], width: int = 110) -> str:
    head = Table.grid(padding=(0, 2))
    head.add_row(f"[bold]line {snapshot['line']}[/]", "running" if snapshot.get("running") else "[red]stopped[/]",
                 f"up {snapshot['uptime_s']:.0f} s", f"ledger: {snapshot.get('ledger_decided', 0)} decided",
                 f"down: {', '.join(snapshot.get('down') or []) or 'none'}")
    units = Table(title="units", title_justify="left")
    for column in ("in", "queued", "in flight", "deadline misses", "late", "duplicates", "p50 ms", "p99 ms"):
        units.add_column(column, justify="right")
    units.add_row(str(sum(snapshot["units_in"].values())), str(snapshot["queue_depth"]), str(snapshot["in_flight"]),
                  str(snapshot["deadline_misses"]), str(snapshot["late_answers"]),
                  str(snapshot["duplicate_triggers"]), _ms(snapshot.get("latency_ms_p50")),
                  _ms(snapshot.get("latency_ms_p99")))
    outcomes = Table(title="outcomes", title_justify="left")
    names = sorted(snapshot["outcomes"]) or ["-"]
    for name in names:
        outcomes.add_column(name, justify="right")
    outcomes.add_row(*[str(snapshot["outcomes"].get(name, 0)) for name in names])
    parts = Table(title="sources and sinks", title_justify="left")
    for column in ("part", "connected", "lag s", "figures"):
        parts.add_column(column)
    for name, figures in snapshot["sources"].items():
        parts.add_row(f"source {name}", _connected(figures), f"{snapshot['source_lag_s'].get(name, 0):.3f}",
                      _figures(figures))
    for name, figures in snapshot["sinks"].items():
        parts.add_row(f"sink {name}", _connected(figures), "", _figures(figures))
    last = Table(title="last units", title_justify="left")
    for column in ("unit", "outcome", "published", "ms", "at", "source"):
        last.add_column(column)
    for unit in snapshot.get("last_units", []):
        last.add_row(unit["unit_id"], unit["outcome"], unit["published_outcome"], f"{unit['latency_ms']:.0f}",
                     unit["decided_at"][11:23], unit["source"])
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    with console.capture() as capture:
        console.print(Group(head, units, outcomes, parts, last))
    return capture.get().rstrip()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"≤{value:g}"


def _connected(figures: dict[str, Any]) -> str:
    return {1: "yes", 0: "NO"}.get(figures.get("connected", -1), "-")


def _figures(figures: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value:g}" if isinstance(value, (int, float)) else f"{key} {value}"
                     for key, value in figures.items() if key != "connected")
