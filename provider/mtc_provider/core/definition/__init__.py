"""What the run is, by concern: its description and checks (description/: run, spec, field_rules, run_checks,
params, plan, jobset_names, locations), the shapes and sizes it needs (shape/: tpu, sizing, capacity, node_pools,
slice_placement, reservations), what it renders (render/: jobset_manifest, jobset_crd, customization, maxtext,
flag_table, checkpoint_config) and what it asks of a cluster (cluster/: readiness, configuration_match, iam, startup).

May import: core.basics and core.measure. Never core.attempt or core.view. (The rehearsal's fault plan is
validated by the local kind's rules, core.basics.kind_rules, from mtc_local.)
No names are re-exported here: import the module.
"""
