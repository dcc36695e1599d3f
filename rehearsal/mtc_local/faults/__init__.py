"""The rehearsal's injected faults as a run description names them: the table of kinds (kinds.py), the one plan
validator (plan.py, shared by the run description, through the local kind's rules, and the runner), the
kind-specific fields (fields.py) and the report of what each fault did (report.py). Only the local target injects faults, so the provider never imports
this package: it reaches the validator through the registry (`TargetKind.rules.check_fault_plan`)."""
