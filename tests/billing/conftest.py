from tests.gpus.conftest import plane  # noqa: F401 (the control plane on the simulator)
