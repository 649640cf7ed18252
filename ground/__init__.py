"""The ground layer: facts, errors, paths, stack outputs, settings and resource tokens.

Imports nothing of tpuctl above it (no infra, policy, bootstrap, services or CLI) and no typer/rich;
the layers contract in pyproject.toml enforces it. See docs/architecture.md.
"""
