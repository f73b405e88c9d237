"""``paraplan calibrate``: measure on a GPU what the cost model assumes and write a GPU profile
(``topologies.gpu_profile``). ``backend`` holds the measuring interface and the fake backend
(tests), ``torch_backend`` the PyTorch one (imported only when asked for), ``run`` the sweep."""
from simulator.calibrate.backend import Backend, FakeBackend, get_backend
from simulator.calibrate.run import CalibrationSpec, calibrate

__all__ = ["Backend", "FakeBackend", "get_backend", "CalibrationSpec", "calibrate"]
