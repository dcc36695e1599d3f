"""Which Airflow deployment this process belongs to: what a run lock records, so that a second deployment sharing a
namespace and a run name is refused instead of taking the lock over.

A deployment can only ask its own Airflow whether a lock's owner is gone: asked about another deployment's task
instance, it finds no row and would call the owner gone. The identity is `[mtc] deployment_id` when set, else
`[core] execution_api_server_url`, the API server every worker and triggerer of one deployment reports to (Airflow
3.3's Task SDK; `airflow config get-value core execution_api_server_url`). Set `[mtc] deployment_id` to the same value
on every component when they reach that server by different addresses.
"""

from __future__ import annotations

DEFAULT = "default"


def current_deployment() -> str:
    from airflow.configuration import conf

    explicit = (conf.get("mtc", "deployment_id", fallback="") or "").strip()
    if explicit:
        return explicit
    return (conf.get("core", "execution_api_server_url", fallback="") or "").strip() or DEFAULT
