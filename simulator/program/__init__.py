"""What each rank runs: the op IR (``ops``), the compiler from a job to per-rank programs
(``compiler``, ``builder`` and its mixins) and the gradient buckets (``grad_buckets``). No
SimPy here."""
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Compute, Program, Recv, Send

__all__ = ["Collective", "Compute", "Program", "Recv", "Send", "compile_job"]
