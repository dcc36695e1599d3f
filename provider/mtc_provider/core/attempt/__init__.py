"""What one try does and decides: the JobSet's status (status), the launch's plan for this try (launch,
launch_options), resubmission, the outage budget, who may delete (ownership), the attempts read from JobSets
(attempts), the typed attempt record and the run's record (attempt_records, run_summary, outcomes, interruptions,
tries), and what the trigger and the pods report (jobset_events, pod_events).

May import: core.basics, core.measure, core.definition. Never core.view.
No names are re-exported here (DAG files import operators that import from here at parse time): import the module.
"""
