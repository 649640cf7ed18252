"""``tpuctl plan``: parse flags, call ``tpuctl.plan.plan``, render. No pulumi import at module load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ground import domain
from ground.access import LOGS_ACCESS, PROJECT_CELL
from ground.errors import UserError
from ground.files import check_writable, write_atomically
from tpuctl.commands.layout import wrap_words
from tpuctl.commands.options import natural_width
from tpuctl.services.plan import checkov_baseline, plan, to_tfplan
from tpuctl.services.runs.cluster import declared_cluster_lines

EXIT_VIOLATIONS = 1
FORMATS = ("table", "json", "tfplan")
#: What a rich table of three columns (default box, padding 1) takes besides its cells.
TABLE_EDGES = 10


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)


def plan_command(
    stack: Optional[str] = typer.Option(None, "--stack", "-s", metavar="NAME",
                                        help="Stack whose Pulumi.<NAME>.yaml to plan (default: example): from "
                                             "$TPUCTL_STACK_DIR when set, else the current folder or a parent up to "
                                             "its git repository's top, else tpuctl's checkout."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", metavar="FILE",
                                          help="Plan this stack config file instead of a stack."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: resources, access, violations, outputs."),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT",
                            help="table (default), json (= --json), or tfplan: the planned resources as a Terraform "
                                 "plan JSON for plan-reading scanners (checkov, conftest)."),
    baseline: Optional[Path] = typer.Option(None, "--checkov-baseline", metavar="FILE",
                                            help="Also write a checkov --baseline file accepting exactly the "
                                                 "findings policy/exceptions.yaml accepts on this plan."),
    no_policy: bool = typer.Option(False, "--no-policy", help="Skip the policy rules (exit 0 unless the config is invalid)."),
) -> None:
    """Preview a stack offline: the resources it would create, who can read/write which bucket, policy verdicts.

    Runs the real Pulumi program under the SDK's mocks: no credentials, no Pulumi CLI.

    Exit 0 when no mandatory policy is violated, 1 when one is, 2 when the config is invalid.
    """

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if as_json and fmt not in ("table", "json"):
        raise UserError("give either --json or --format, not both")
    fmt = "json" if as_json else fmt
    if baseline is not None:
        check_writable(baseline)        # a FIFO, a folder or a device is refused before the plan's work
    result = plan(stack=stack, config_file=config, check_policy=not no_policy)
    if baseline is not None:
        write_atomically(baseline, json.dumps(checkov_baseline(result, str(baseline.parent / "plan.json")), indent=2)
                         + "\n")
    if fmt == "json":
        typer.echo(json.dumps(result.to_json(), indent=2, sort_keys=False, default=str))
    elif fmt == "tfplan":
        typer.echo(json.dumps(to_tfplan(result), indent=2, default=str))
    else:
        render(result)
    if result.exit_code:
        if fmt != "table":   # stdout is a document: the reason goes to stderr as one line
            first = result.mandatory[0]
            typer.echo(f"error: {len(result.mandatory)} mandatory policy violation(s); first: {first.rule}: "
                       f"{' '.join(str(first.message).split())}", err=True)
        raise typer.Exit(EXIT_VIOLATIONS)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _lines(console: Console, text: str, *, indent: int = 0, hang: int | None = None, style: str = "") -> None:
    """``text`` wrapped to the console's width between words (``layout.wrap_words``: a word wider than a line is
    broken after a ``/``, ``:``, ``@`` …, never cut), the first line indented ``indent``, the others ``hang``."""
    hang = indent if hang is None else hang
    for number, line in enumerate(wrap_words(text, console.width - max(indent, hang))):
        console.print(Text(" " * (hang if number else indent) + line, style=style, overflow="fold"))


def render(result: Any) -> None:
    console = Console(highlight=False)
    if not console.is_terminal and console.width < 120:  # piped or captured: room for the tables
        console = Console(highlight=False, width=120)
    outputs = result.outputs
    console.print(Text.assemble(
        ("Plan ", "bold"), (result.source, "bold cyan"),
        f": {len(result.resources)} resources in project {outputs.get('project')} "
        f"({outputs.get('region')}), access mode {outputs.get('access_mode')}",
    ))

    groups: dict[str, list[Any]] = {}
    for res in result.resources:
        groups.setdefault(res.component, []).append(res)
    for component, members in groups.items():
        rows = [(res.short_type, res.name, [f"{k}={_cell(v)}" for k, v in res.properties.items()]) for res in members]
        type_width = max(len("type"), *(len(kind) for kind, _, _ in rows))
        name_width = max(len("name"), *(len(name) for _, name, _ in rows))
        props_width = console.width - type_width - name_width - TABLE_EDGES
        if props_width < max(len("key properties"), *(len(prop) for _, _, props in rows for prop in props)):
            # a table would break a name or a property inside (issue 44: 80 columns made cells break mid-word over
            # ~400 lines; issue 57: 120 still broke e-mails): a document, one entry per resource, its properties
            # wrapped between properties (a member e-mail wider than the line broken after its `serviceAccount:`)
            console.print(Text(f"{component} ({len(members)})", style="italic"))
            for kind, name, props in rows:
                console.print(Text.assemble("  ", (kind, "cyan"), f"  {name}"), overflow="fold")
                if props:
                    _lines(console, " ".join(props), indent=4)
            continue
        table = Table(title=f"{component} ({len(members)})", title_justify="left", expand=False)
        table.add_column("type", style="cyan", no_wrap=True)
        table.add_column("name", no_wrap=True)
        table.add_column("key properties", no_wrap=True)
        for kind, name, props in rows:
            table.add_row(kind, name, "\n".join(wrap_words(" ".join(props), props_width)))
        console.print(table)
    for line in declared_cluster_lines(result.settings):
        _lines(console, line, hang=4)

    buckets = outputs.get("buckets") or {}
    columns = [p for p in domain.BUCKET_PURPOSES if p in buckets]
    extra = sorted({row["bucket"] for row in result.access} - set(buckets.values()))
    if not result.access:
        console.print(Text("Access map: no IAM or ACL grants on any bucket", style="yellow"))
    else:
        title = "Access map (derived from the IAM and ACL resources; project roles count on every bucket)"
        access = Table(title=title, title_justify="left")
        access.add_column("principal", no_wrap=True)   # a principal is never broken over lines
        for purpose in columns:
            access.add_column(purpose, no_wrap=True)
        for name in extra:
            access.add_column(name, no_wrap=True)
        cells: dict[str, dict[str, str]] = {}
        labels: dict[str, str] = {}
        notes = sorted({row["note"] for row in result.access if row.get("note")})
        for row in result.access:
            mark = "*" * (notes.index(row["note"]) + 1) if row.get("note") else ""
            cells.setdefault(row["principal"], {})[row["bucket"]] = row["access"] + mark
            labels[row["principal"]] = row.get("keyword") or row["principal"]
        for principal in sorted(cells, key=lambda p: (labels[p] == p, labels[p])):
            values = ([cells[principal].get(buckets[p], "-") for p in columns]
                      + [cells[principal].get(b, "-") for b in extra])
            access.add_row(labels[principal], *values)
        legend = [f"{purpose} = gs://{buckets[purpose]}" for purpose in columns]
        if PROJECT_CELL in extra:
            legend.append(f"{PROJECT_CELL} = project {outputs.get('project')}; {LOGS_ACCESS}: may write log entries "
                          f"({domain.LOG_WRITE_PERMISSION})")
        legend += [f"{labels[p]} = {p}" for p in sorted(cells) if labels[p] != p]
        heads = [*columns, *extra]
        rows = [[labels[p], *([cells[p].get(buckets[c], "-") for c in columns] + [cells[p].get(b, "-") for b in extra])]
                for p in cells]

        if natural_width(["principal", *heads], rows) <= console.width:
            console.print(access)
        elif console.width < 120:   # a terminal too narrow for the table: each principal on its line, its grants
            _lines(console, title, style="italic")            # wrapped below it, no name cut (issue 57)
            for principal in sorted(cells, key=lambda p: (labels[p] == p, labels[p])):
                values = ([cells[principal].get(buckets[p], "-") for p in columns]
                          + [cells[principal].get(b, "-") for b in extra])
                _lines(console, labels[principal], indent=2, hang=4)
                _lines(console, " ".join(f"{h}={v}" for h, v in zip(heads, values) if v != "-"), indent=4)
        else:   # too narrow for the table: a paragraph per principal, wrapped between grants, no name cut
            console.print(Text(title, style="italic"))
            for principal in sorted(cells, key=lambda p: (labels[p] == p, labels[p])):
                values = ([cells[principal].get(buckets[p], "-") for p in columns]
                          + [cells[principal].get(b, "-") for b in extra])
                grants = [f"{h}={v}" for h, v in zip(heads, values) if v != "-"]
                _lines(console, f"{labels[principal]}: " + " ".join(grants), indent=2, hang=4)
        legend += [f"{'*' * (i + 1)} {note}" for i, note in enumerate(notes)]
        for line in legend:
            _lines(console, line, indent=2, hang=6)

    if not result.policy_checked:
        console.print(Text("Policy: skipped (--no-policy)", style="yellow"))
        return
    ordered = sorted(result.violations, key=lambda v: (not v.mandatory, v.rule, v.resource or ""))
    narrow = natural_width(["level", "rule", "resource", "message"],
                           [[v.level, v.rule, v.resource or "(stack)", v.message] for v in ordered]) > console.width
    if result.violations and narrow and console.width < 120:     # a document, as above
        console.print(Text("Policy verdicts", style="italic"))
        for v in ordered:
            console.print(Text.assemble("  ", (v.level, "bold red" if v.mandatory else "yellow"),
                                        f"  {v.rule}  {v.resource or '(stack)'}"), overflow="fold")
            _lines(console, str(v.message), indent=4)
    elif result.violations:
        verdicts = Table(title="Policy verdicts", title_justify="left")
        verdicts.add_column("level", no_wrap=True)
        verdicts.add_column("rule", no_wrap=True)
        verdicts.add_column("resource")
        verdicts.add_column("message", overflow="fold")
        for v in sorted(result.violations, key=lambda v: (not v.mandatory, v.rule, v.resource or "")):
            verdicts.add_row(Text(v.level, style="bold red" if v.mandatory else "yellow"), v.rule,
                             v.resource or "(stack)", v.message)
        console.print(verdicts)
    mandatory = len(result.mandatory)
    advisory = len(result.violations) - mandatory
    if mandatory:
        _lines(console, f"Policy: {mandatory} mandatory violation(s), {advisory} advisory — `pulumi up` with "
                        "--policy-pack policy would be blocked", style="bold red")
    else:
        console.print(Text(f"Policy: passed ({advisory} advisory)", style="bold green"))
