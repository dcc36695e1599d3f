"""Shared basics of the core: the one exception hierarchy, the words both sides of a boundary spell the same,
Kubernetes name checks, the run's labels, GKE version strings and the extras' install line.

May import: nothing of mtc_provider but this package (the ground floor); kind_rules.rules_for alone asks the
target registry (mtc_provider.targets.registry) for a kind's rules when it is called, never at import.
No names are re-exported here: import the module (`from mtc_provider.core.basics.errors import SpecError`).
"""
