"""Imperative setup against live Google APIs: grant access, service agents, hub models, state bucket.

Plain functions the CLI (tpuctl/commands/access.py, hubcache.py) calls. Google's libraries come through
``cloud.google`` (imported on first use), so importing these modules loads none of them.
"""
