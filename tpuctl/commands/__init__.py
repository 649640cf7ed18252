"""One module per command group: each defines its typer commands and ``register(app)``, which adds them. The CLI
imports a command's module only when that command runs or shows its help (``tpuctl.cli.COMMANDS``), so a module
imports what it uses at its top; Google's libraries are reached through ``cloud.google`` (imported on first use)."""
