"""The resource rules: plain functions ``check(rtype, props, settings) -> [message, …]``.

One function per rule, one message per problem, each message saying what to change. Each rule is registered by
``@resource_rule`` right above its function, with its level, types, config keys, checkov ids and rationale;
``RESOURCE_RULES`` lists them in the order they are defined (buckets, IAM, objects). ``policy.pack`` turns them
into pulumi_policy policies and ``policy.evaluate`` runs them for ``tpuctl plan`` and the tests.
"""

# Importing the rule modules registers their rules, in this order.
from policy.rules import buckets, iam, objects
from policy.rules.base import ADVISORY, MANDATORY, REGISTERED, Rule, resource_rule

RESOURCE_RULES: tuple[Rule, ...] = tuple(REGISTERED)

__all__ = ["ADVISORY", "MANDATORY", "RESOURCE_RULES", "Rule", "buckets", "iam", "objects", "resource_rule"]
