"""How a run's progress is measured: finalized checkpoints from names (listing), the training step from the
workload's log (step_log), the one progress signal (progress), the stall limit derived from the run's cadence
(cadence) and the progress line a long run shows (progress_report).

May import: core.basics. Below the run definition because the run description derives its stall limit here.
No names are re-exported here: import the module.
"""
