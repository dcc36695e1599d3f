"""What the run is: the run description (run, spec), its checks (run_checks, jobset_names), the shapes and sizes it
needs (tpu, sizing, locations, node_pools, capacity), what it renders (maxtext, flag_table, jobset_manifest,
customization, checkpoint_config), what it asks of a cluster (readiness, configuration_match, iam, startup), the
plan, and the training DAG's form (params).

May import: core.basics and core.measure. Never core.attempt or core.view. (The rehearsal's fault plan is
validated by the local kind's rules, core.basics.kind_rules, from mtc_local.)
No names are re-exported here: import the module.
"""
