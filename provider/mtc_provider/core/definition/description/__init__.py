"""The run's description and its checks: the one parse (run), the spec and its field rules, the training DAG's form (params), the plan, the names and locations it needs.

No names are re-exported here: import the module."""
