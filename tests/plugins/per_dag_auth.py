"""An auth manager that grants per-DAG access: Airflow's SimpleAuthManager (its login, its JWTs, its roles) with
one policy of its own, `is_authorized_dag` by DAG id, as a deployment's auth manager with DAG-level access control
(the FAB auth manager's per-DAG permissions, Keycloak's resources) decides it.

The grants: `MTC_TEST_DAG_GRANTS`, JSON {username: [dag_id, ...]}; a user not named there may read no DAG.
Set `[core] auth_manager = tests.plugins.per_dag_auth.PerDagAuthManager` (tests/plugins/conftest.py).
"""

from __future__ import annotations

import json
import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def grants() -> dict[str, set[str]]:
    return {user: set(dags) for user, dags in json.loads(os.environ.get("MTC_TEST_DAG_GRANTS") or "{}").items()}


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        dag_id = details.id if details is not None else None
        if dag_id is None:  # "any DAG" (lists): the role decides, each DAG is filtered by id below
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        return method == "GET" and dag_id in grants().get(user.username, set())
