"""The tpuctl Pulumi program: config (config.py), one component per concern, wiring (program.py).

Nothing here registers a resource at import time; ``program.build`` does, after the mocks or the
engine are set up. ``mocks.run_program`` runs the whole program offline (tests, ``tpuctl plan``).
"""
