"""A fake Kubernetes API server: ``python -m simulator.kube --port 8082``.

The official ``kubernetes`` client and real kubectl talk to it over real HTTPS. One
process serves many clusters, each under its own base path
(``https://HOST:PORT/clusters/<name>``, the ``server`` of its kubeconfig), with its own
bearer token.

How the pieces fit (read in this order):

* ``resources``: the kinds served (nodes, pods, namespaces, configmaps, CRDs, and custom
  resources registered by a CRD) and their discovery entries;
* ``selectors``: label and field selectors;
* ``patches``: JSON merge, strategic merge and JSON patches;
* ``validation``: what the real server refuses in what is written (422 Invalid);
* ``store``: ``ClusterState``, one cluster's objects and the API server's rules
  (resourceVersion, paging with continue tokens, 404/409/410, status subresources,
  the event history watches read, dry runs, Secrets' stringData), with no HTTP;
* ``openapi``: OpenAPI v2 and v3 of the built-in kinds, from the published schemas;
* ``tls``: its CA and server certificate;
* ``errors``: Status objects as the real server words them;
* ``faults``: injected failures per operation;
* ``server``: the HTTPS server, routing, watch streams, the control API (``/_sim/``),
  the call log;
* ``pods``: a pod's binding and eviction subresources, PodDisruptionBudgets' status;
* ``scheduler``: the scheduler and kubelets (``--schedule``): pods placed, run, finished;
* ``joiner``: the demo's nodes, from the VMs of a whitesky simulator.

Why its own server rather than a subclass of ``kmock``: the contract is in
``docs/simulator-contract.md`` (section "The Kubernetes simulator").
"""
