"""tpuctl's policy pack (Pulumi CrossGuard).

Importing this package starts nothing: the rules are plain functions over (type, props) in
``policy.rules`` and ``ground.access``; ``policy.pack`` wraps them as pulumi_policy objects and
``policy/__main__.py`` is the only place that constructs the ``PolicyPack`` (which starts the
analyzer gRPC server and blocks).
"""
