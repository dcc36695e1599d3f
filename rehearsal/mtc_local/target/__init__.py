"""The local target's side of the provider: its backend (cluster control, JobSet connection, bucket, checkpoint
store), reached by the provider's target registry through the `mtc_provider.targets` entry point."""
