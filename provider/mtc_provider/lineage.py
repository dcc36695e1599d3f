"""OpenLineage facets: the bucket, launch and progress operators report the run's checkpoint directory as a dataset,
as the google provider's GCS operators report theirs (`OperatorLineage` of `Dataset(namespace="gs://BUCKET",
name=PATH)`, the OpenLineage naming spec for GCS: https://openlineage.io/docs/spec/naming).

The OpenLineage provider (`apache-airflow-providers-openlineage`) calls the operators'
`get_openlineage_facets_on_complete` through its DefaultExtractor; without it installed nothing here is imported.
A local directory (the local target's bucket folders, or a plain path) is named as the spec names local files:
namespace `file`, name the absolute path.
"""

from __future__ import annotations

from typing import Any, Iterable

GCS_SCHEME = "gs://"
FILE_NAMESPACE = "file"


def dataset_name(location: str) -> tuple[str, str]:
    """(namespace, name) of a checkpoint directory or bucket: gs://b/p -> ("gs://b", "p"); gs://b -> ("gs://b", "/");
    /abs/path or file:///abs/path -> ("file", "/abs/path")."""
    if location.startswith(GCS_SCHEME):
        bucket, _, path = location[len(GCS_SCHEME):].partition("/")
        return f"{GCS_SCHEME}{bucket}", path.strip("/") or "/"
    path = location[len("file://"):] if location.startswith("file://") else location
    return FILE_NAMESPACE, "/" + path.strip("/")


def operator_lineage(inputs: Iterable[str] = (), outputs: Iterable[str] = ()) -> Any:
    """An OperatorLineage with these locations as input and output datasets."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    def datasets(locations: Iterable[str]) -> list[Any]:
        return [Dataset(namespace=namespace, name=name) for namespace, name in map(dataset_name, locations) if name]

    return OperatorLineage(inputs=datasets(inputs), outputs=datasets(outputs))
