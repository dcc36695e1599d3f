"""What the run renders: the JobSet manifest and its CRD's schema, the user's customization, MaxText's command and its flag table, the CheckpointConfiguration.

No names are re-exported here: import the module."""
