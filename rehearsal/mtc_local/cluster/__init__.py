"""The local cluster: a small Kubernetes API server (apiserver.py) over an object store (store.py), hosted by the
runner's supervisor, which is its JobSet controller and kubelet. Clients reach it through `<home>/kubeconfig`."""
