"""Services: orchestration above infra/, policy/ and bootstrap/ (local runs, data tools, Vertex, plans).

Plain functions that the CLI calls; they raise ``ground.errors.UserError`` and never render.
"""
