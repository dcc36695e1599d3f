"""Provider metadata Airflow reads through the `apache_airflow_provider` entry point (see pyproject.toml).

`package-name` must equal the distribution name. Module lists name the modules the provider ships; the
test validates this against the provider_info.schema.json that Airflow itself ships.

The run view plugin (plugins/run_view.py) is registered by the `airflow.plugins` entry point (pyproject.toml), not
under a `plugins` key here: Airflow 3.3 reads that key only with `[core] lazy_discover_providers = False`
(plugins_manager._get_plugins), and a plugin found both ways is reported as an import error ("already registered").
"""

from __future__ import annotations

from typing import Any

from mtc_provider import __version__

INTEGRATION = "Multi-Tier Checkpointing"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-mtc",
        "name": "Multi-Tier Checkpointing (MTC)",
        "description": (
            "Resilient TPU training on GKE with Multi-Tier (emergency) Checkpointing: prepare the cluster "
            "and bucket, launch MaxText as a JobSet with the MTC ramdisk, watch checkpoints and resubmit "
            "failed runs; a local target rehearses the same DAGs with real JAX/Orbax processes."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing",
                "tags": ["gcp", "kubernetes"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "mtc_provider.operators.base",
                    "mtc_provider.operators.delete_jobset",
                    "mtc_provider.operators.jobset",
                    "mtc_provider.operators.jobset_end",
                    "mtc_provider.operators.jobset_failures",
                    "mtc_provider.operators.jobset_launch",
                    "mtc_provider.operators.gcp",
                    "mtc_provider.operators.goodput",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "mtc_provider.sensors.jobset",
                    "mtc_provider.sensors.gcp",
                    "mtc_provider.sensors.checkpoint",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "mtc_provider.triggers.jobset",
                    "mtc_provider.triggers.checkpoint",
                    "mtc_provider.triggers.gcp",
                    "mtc_provider.triggers.attempt_end",
                    "mtc_provider.triggers.ledger_writer",
                    "mtc_provider.triggers.next_in_try",
                    "mtc_provider.triggers.kill",
                    "mtc_provider.triggers.stall_end",
                ],
            }
        ],
        # MtcJobSetHook builds on the google and cncf.kubernetes hooks; it adds no connection type.
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["mtc_provider.hooks.jobset"],
            }
        ],
        # Airflow's LocalExecutor with the launch tries' imports made before its workers fork (docs/deployment.md).
        "executors": ["mtc_provider.executors.local.PreloadLocalExecutor"],
        # With executors and no `cli` section, every `airflow` command logs a 6-line warning to stdout and
        # imports the executor (airflow/cli/cli_parser.py); the section names the executors' commands: none.
        "cli": ["mtc_provider.executors.cli.get_cli_commands"],
        # Read by the run view's file routes (adapters/file_roots.py); docs/run-view.md.
        "config": {
            "mtc": {
                "description": "Multi-Tier Checkpointing provider settings.",
                "options": {
                    "run_view_file_roots": {
                        "description": (
                            "Comma-separated absolute folders under which the run view plugin may read a local "
                            "run's own folder (its checkpoints, events and record). Each root must be at least two "
                            "levels deep and hold neither AIRFLOW_HOME nor the api-server user's home; `/`, "
                            "relative and top-level roots are refused with an error naming this option. Files are "
                            "opened without following symbolic links; anything else is answered 404. "
                            "Empty: the local target's bucket folder, <local home>/buckets ($MTC_LOCAL_HOME, "
                            "default ~/.mtc/local). docs/security.md."
                        ),
                        "version_added": None,
                        "type": "string",
                        "example": "/opt/airflow/mtc-local/buckets,/data/runs",
                        "default": "",
                    },
                    "deployment_id": {
                        "description": (
                            "The Airflow deployment a run lock records (adapters/deployment.py): a second deployment "
                            "writing the same checkpoints is refused, never takes the lock over. Empty: an id "
                            "generated once and stored in this deployment's metadata database (the Variable "
                            "mtc_deployment_id), the same for all its components (docs/security.md)."
                        ),
                        "version_added": None,
                        "type": "string",
                        "example": "team-a-prod",
                        "default": "",
                    },
                    "lock_namespace": {
                        "description": (
                            "The Kubernetes namespace of the checkpoint claims (adapters/run_lock.py): one ConfigMap "
                            "per checkpoint directory, shared by every launch on the cluster whatever namespace its "
                            "JobSet runs in; the launch connection needs create, get, update and delete on "
                            "configmaps there (docs/security.md)."
                        ),
                        "version_added": None,
                        "type": "string",
                        "example": "mtc-locks",
                        "default": "default",
                    },
                },
            },
        },
        "extra-links": [
            "mtc_provider.links.jobset.JobSetWorkloadLink",
            "mtc_provider.links.jobset.JobSetLogsLink",
            "mtc_provider.links.jobset.CheckpointFolderLink",
            "mtc_provider.links.gcp.GkeClusterLink",
            "mtc_provider.links.gcp.GcsBucketLink",
        ],
    }
