"""A whitesky.cloud VCO simulator: ``python -m simulator.whitesky --port 8081``.

How the pieces fit (read in this order):

* ``worldfile``: turns a world file (JSON) into the initial records;
* ``records``: the records (cards, vGPUs, VMs, NICs, ...) as plain dataclasses;
* ``state``: ``World``, the behaviour of the platform on those records, with no HTTP;
* ``switches``: every behaviour the simulator has to guess, one named flag each;
* ``api``: one function per operationId of the description; they parse the request and
  shape the answer exactly as the description (``whitesky-api.json``) says;
* ``faults``, ``auth``, ``control``: injected failures, JWTs, the ``/_sim/`` control API;
* ``server``: the HTTP server and the request pipeline (route, fault, authenticate, act,
  record the call, persist).

The contract for tests and the demo is ``docs/simulator-contract.md``.
"""
