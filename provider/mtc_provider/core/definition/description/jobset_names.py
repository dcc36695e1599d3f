"""The names JobSet derives from a JobSet's name, checked as JobSet's admission webhook checks them.

kubernetes-sigs/jobset `pkg/webhooks/jobset_webhook.go` (`ValidateCreate`, the same at v0.10.1 and v0.12.0), for
each replicatedJob:
- the longest Job name, `placement.GenJobName(js.Name, rJob.Name, replicas-1)` = `<jobset>-<rjob>-<replicas-1>`,
  must pass `validation.IsDNS1035Label` (else `jobNameTooLongErrorMsg`);
- for an Indexed Job, the longest pod name, `placement.GenPodName(js.Name, rJob.Name, replicas-1, completions-1)`
  plus the stand-in `-abcde` for the 5 random characters, must pass it too (else `podNameTooLongErrorMsg`).
(`pkg/util/placement/placement.go`: both names are `fmt.Sprintf("%s-%s-%d...")`.) `IsDNS1035Label`
(k8s.io/apimachinery `pkg/util/validation`): at most 63 characters (`DNS1035LabelMaxLength`), lower-case letters,
digits and '-', starting with a letter and ending with a letter or digit. Both names start with the JobSet's name,
so that name must start with a letter, and its length is bounded by the other parts.

The launch operator submits each attempt as `<jobset_name>-<5 hex>-a<attempt>`, cut to 40 characters: the checks use
the longest name it can submit, so a run that plans cleanly is also admitted on its later attempts.
"""

from __future__ import annotations

import hashlib
import re

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.names import JOBSET_NAME_MAX

JOBSET_WEBHOOK = "JobSet's webhook (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go@v0.10.1 and @v0.12.0)"
DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL_MAX = 63
POD_NAME_SUFFIX = "-abcde"  # the webhook's stand-in for the pod's 5 random characters
ATTEMPT_NAME_MAX = JOBSET_NAME_MAX  # attempts are cut to the JobSet name limit
ATTEMPT_SUFFIX_MAX = len("-00000-a999")  # the longest attempt suffix up to attempt 999


def attempt_name(jobset_name: str, dag_id: str, run_id: str, task_id: str, attempt: int) -> str:
    """`<jobset_name>-<5 hex of the run>-a<attempt>`, cut to the JobSet name limit (40)."""
    digest = hashlib.sha256(f"{dag_id}/{run_id}/{task_id}".encode()).hexdigest()[:5]
    suffix = f"-{digest}-a{attempt}"
    return f"{jobset_name[: ATTEMPT_NAME_MAX - len(suffix)].rstrip('-')}{suffix}"


def longest_attempt_length(jobset_name: str) -> int:
    """The length of the longest name the launch operator submits for this jobset_name (attempts up to 999)."""
    return min(ATTEMPT_NAME_MAX, len(jobset_name) + ATTEMPT_SUFFIX_MAX)


def longest_job_name(jobset: str, replicated_job: str, replicas: int) -> str:
    return f"{jobset}-{replicated_job}-{replicas - 1}"


def longest_pod_name(jobset: str, replicated_job: str, replicas: int, completions: int) -> str:
    return f"{jobset}-{replicated_job}-{replicas - 1}-{completions - 1}{POD_NAME_SUFFIX}"


def check_jobset_names(jobset_name: str, replicated_job_name: str, replicas: int, completions: int,
                       field: str = "workload.jobset_name", attempts: bool = True) -> None:
    """Refuse a JobSet name whose derived Job or pod names JobSet's webhook would refuse (`replicas` slices of
    `completions` hosts). With `attempts`, the name checked is the longest attempt name the operator submits."""
    if not DNS1035_LABEL_RE.match(jobset_name[:1] or "-"):
        raise SpecError(field, jobset_name,
                        f"a name starting with a lower-case letter: {JOBSET_WEBHOOK} requires the Job and pod names "
                        f"it derives ({longest_job_name(jobset_name, replicated_job_name, replicas)}, ...) to be "
                        "DNS-1035 labels")
    length = longest_attempt_length(jobset_name) if attempts else len(jobset_name)
    stand_in = "j" * length  # only the length of the submitted name matters from here on
    pod = longest_pod_name(stand_in, replicated_job_name, replicas, completions)
    if len(pod) <= DNS1035_LABEL_MAX and len(longest_job_name(stand_in, replicated_job_name, replicas)) <= DNS1035_LABEL_MAX:
        return
    room = DNS1035_LABEL_MAX - (len(pod) - length)  # the longest submitted JobSet name that still fits
    limit = room - ATTEMPT_SUFFIX_MAX if attempts else room
    shape = (f"{replicas} slices x {completions} hosts with replicated job {replicated_job_name!r}: the longest pod "
             f"name, <jobset>-{replicated_job_name}-{replicas - 1}-{completions - 1}{POD_NAME_SUFFIX}, is "
             f"{len(pod)} characters and {JOBSET_WEBHOOK} allows {DNS1035_LABEL_MAX}")
    if limit < 1:
        raise SpecError("workload.replicated_job_name", replicated_job_name,
                        f"a shorter replicated job name (e.g. slice) for {shape}")
    submitted = " (attempts are submitted as <jobset_name>-<5 hex>-a<attempt>)" if attempts else ""
    raise SpecError(field, jobset_name,
                    f"at most {limit} characters{submitted} for {shape}; or a shorter workload.replicated_job_name")
