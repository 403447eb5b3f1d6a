"""``deniable mechanisms``: the catalogue of registered word mechanisms (from the registry's declarations)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ._common import app, stdout_console


@app.command("mechanisms")
def mechanisms_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalogue as JSON (as /v1/mechanisms).")] = False,
) -> None:
    """List every registered mechanism: guarantee, metric, what it needs prepared, speed, page.

    The same rows as the service's /v1/mechanisms ("catalogue"), declared once in the
    registry. Mechanisms whose guarantee is not metric DP are marked; the service offers
    them only with allow_non_metric = true.
    """
    from rich.table import Table

    from ..mechanisms.registry import catalogue

    rows = catalogue()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table(title="Registered word mechanisms (deniable privatize -m NAME)", show_lines=True)
    for column in ("name", "guarantee", "metric", "exact", "prepared", "cost per token", "what it does", "page"):
        table.add_column(column, overflow="fold")
    for r in rows:
        guarantee = r["guarantee"] if r["metric_dp"] else f"[bold red]not metric DP[/]: {r['guarantee']}"
        table.add_row(
            r["name"],
            guarantee,
            r["metric"],
            "yes" if r["exact"] else "sampled",
            r["prepared"] or "-",
            r["speed"],
            f"{r['summary']} ({r['paper']})",
            r["page"],
        )
    stdout_console().print(table)


def mechanism_flag_help(lead: str = "") -> str:
    """The ``--mechanism`` help: every registered name (from the registry, no class imported)."""
    from ..mechanisms import mechanism_names

    names = ", ".join(mechanism_names())
    return f"{lead}One of: {names}. `deniable mechanisms` lists each one's guarantee, metric, cost and page."
