"""Imperative setup against live Google APIs: grant access, service agents, hub models, state bucket.

Plain functions the CLI (tpuctl/commands/access.py, hubcache.py) calls. google.cloud.* imports
happen inside these modules, which the CLI imports lazily so `tpuctl --help` stays fast.
"""
