"""Which Airflow deployment this process belongs to: what a run lock records, so that a second deployment writing
the same checkpoints is refused instead of taking the lock over.

A deployment can only ask its own Airflow whether a lock's owner is gone: asked about another deployment's task
instance, it finds no row and would call the owner gone. So the identity must differ between two deployments without
any configuration, and be the same for every component of one (scheduler, workers, triggerer, on any machine).

It is `[mtc] deployment_id` when set; otherwise a random id generated once and stored in the deployment's own metadata
database as the Airflow Variable `mtc_deployment_id` (read through the Task SDK in a task or trigger, from the database
elsewhere). An address (the Execution API URL) is not an identity: every copy of one compose file has the same one.
A file under AIRFLOW_HOME is not either: each machine of one deployment has its own.

Copying this Variable into another deployment (`airflow variables export` / `import`) makes the two one deployment
for the run lock: give the copy its own id (delete the Variable there, or set `[mtc] deployment_id`).
"""

from __future__ import annotations

import logging
import threading
import uuid

log = logging.getLogger(__name__)

VARIABLE = "mtc_deployment_id"
UNKNOWN = "default"  # where no Airflow metadata store answers (code run outside any Airflow deployment)
_cache: dict[str, str] = {}
_cache_lock = threading.Lock()


def current_deployment() -> str:
    """`[mtc] deployment_id`, else this deployment's stored id (generated on first use)."""
    from airflow.configuration import conf

    explicit = (conf.get("mtc", "deployment_id", fallback="") or "").strip()
    if explicit:
        return explicit
    key = conf.get("database", "sql_alchemy_conn", fallback="") or ""
    with _cache_lock:
        if key not in _cache:
            try:
                _cache[key] = stored_deployment()
            except Exception as exc:  # noqa: BLE001 - no metadata store: not a deployment, nothing to share with
                log.warning("the deployment's id (Airflow Variable %s) could not be read or stored (%s: %s); this "
                            "process records run locks as %r", VARIABLE, type(exc).__name__, exc, UNKNOWN)
                return UNKNOWN
        return _cache[key]


def stored_deployment() -> str:
    """The Variable's value, written once: a racing first writer's value wins (read back after writing), so two
    components that both found none still end up with the same id."""
    get, put = _variables()
    found = (get(VARIABLE) or "").strip()
    if found:
        return found
    put(VARIABLE, f"airflow-{uuid.uuid4()}")
    found = (get(VARIABLE) or "").strip()
    log.info("this Airflow deployment's id for run locks: %s (Variable %s)", found, VARIABLE)
    return found


DESCRIPTION = ("This Airflow deployment's id in the mtc provider's run locks (generated once; never copy it to another "
               "deployment)")


def _variables():
    """(get, set) of Airflow Variables: the Task SDK's in a task or trigger (through the Execution API / the
    triggerer's supervisor), the metadata database's elsewhere (the API server, the CLI)."""
    import sys

    if hasattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS"):
        from airflow.sdk import Variable

        return (lambda key: Variable.get(key, default=None),
                lambda key, value: Variable.set(key, value, description=DESCRIPTION))
    from airflow.models.variable import Variable as DbVariable

    return (lambda key: DbVariable.get(key, default_var=None),
            lambda key, value: DbVariable.set(key, value, description=DESCRIPTION))
