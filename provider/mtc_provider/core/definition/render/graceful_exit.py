"""A graceful preemption that JobSet restarts in the cluster: the container's exit code after SIGTERM below target.

MaxText saves on SIGTERM and exits 0, and a pod that exits 0 has Succeeded even with the `DisruptionTarget`
condition (Kubernetes 1.27+, kubernetes#118310), so no podFailurePolicy rule sees it. With
`workload.graceful_preemption: in_cluster` the training command runs under this wrapper (`python3 -c`, no file in the
image): it forwards SIGTERM, copies the output through while reading the `completed step: N` lines
(core.measure.step_log's pattern), and when the workload exits 0 after a SIGTERM below its last step it exits 143
(128 + SIGTERM), so the pod rule 0 and JobSet's `RestartOnDisruption` restart every slice without counting against
maxRestarts (core.definition.render.jobset_manifest). Every other exit keeps its code; a workload killed by signal N
exits 128 + N, as Kubernetes would report it. docs/resubmission.md, "A graceful preemption restarted in the
cluster", walks the Job and JobSet rules.
"""

from __future__ import annotations

from typing import Sequence

from mtc_provider.core.measure.step_log import STEP_LINE

IN_CLUSTER = "in_cluster"
OPERATOR = "operator"
MODES = (IN_CLUSTER, OPERATOR)
MODES_ALLOWED = ("in_cluster (a SIGTERM below the last step exits 143: JobSet restarts every slice in the cluster) or "
                 "operator (the workload's own exit code: MaxText's 0 completes the JobSet, the operator resubmits)")
EXIT_STOPPED_BELOW_TARGET = 143  # 128 + SIGTERM(15)
WRAPPER_INTERPRETER = "python3"

# The wrapper's whole source, run as `python3 -c SOURCE <last step> <command...>`. Kept free of `$(`, which
# Kubernetes would expand in a command. Reads both streams: absl's logger writes to stderr, print to stdout.
_WRAPPER_BODY = '''\
import re, signal, subprocess, sys, threading
last, argv, seen, term, child = int(sys.argv[1]), sys.argv[2:], [-1], [], []
STEP = re.compile(STEP_PATTERN)
def on_term(signum, frame):
    term.append(signum)
    for proc in child:
        try: proc.send_signal(signum)
        except OSError: pass
signal.signal(signal.SIGTERM, on_term)
try: child.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
except OSError as err: sys.stderr.write("mtc: cannot start %r: %s\\n" % (argv[:1], err)); sys.exit(127)
if term: on_term(signal.SIGTERM, None)
def pump(src, dst):
    for line in iter(src.readline, b""):
        found = STEP.search(line)
        if found: seen[0] = max(seen[0], int(found.group("step")))
        dst.write(line); dst.flush()
pumps = [threading.Thread(target=pump, args=pair, daemon=True)
         for pair in ((child[0].stdout, sys.stdout.buffer), (child[0].stderr, sys.stderr.buffer))]
for t in pumps: t.start()
code = child[0].wait()
for t in pumps: t.join(5)
if code < 0: code = 128 - code
elif code == 0 and term and seen[0] < last:
    sys.stderr.write("mtc: stopped by SIGTERM at step %d, below the last step %d: exit %d, a restart in the cluster\\n"
                     % (seen[0], last, EXIT))
    code = EXIT
sys.stdout.flush(); sys.stderr.flush()
sys.exit(code)
'''
# The step pattern is core.measure.step_log's own, so the wrapper and the trigger read the same lines as steps.
WRAPPER_SOURCE = f"EXIT = {EXIT_STOPPED_BELOW_TARGET}\nSTEP_PATTERN = {STEP_LINE.pattern.encode()!r}\n" + _WRAPPER_BODY


def wrap_command(command: Sequence[str], last_step: int) -> list[str]:
    """The container's command with the wrapper in front: `python3 -c SOURCE <last step> <command...>`."""
    return [WRAPPER_INTERPRETER, "-c", WRAPPER_SOURCE, str(int(last_step)), *command]
