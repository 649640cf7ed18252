"""Imperative setup against live Google APIs: grant access, service agents, hub models, state bucket.

Plain functions the CLI (tpuctl/commands/access.py, hubcache.py) calls. google.cloud.* imports
happen inside these modules, which the CLI imports lazily so `tpuctl --help` stays fast.
"""

import warnings

# google-api-core warns about the interpreter's end of life on every import; the CLI's stderr
# is for the user's errors.
warnings.filterwarnings("ignore", message=r"You are using a Python version .* which Google will stop supporting",
                        category=FutureWarning)
