"""The flow network: max-min fair flows over a networkx graph (``flows``), its cluster
adapter (``cluster_net``) and the lock-step collective algorithms kept as a test oracle
(``stepwise``)."""
from simulator.network.cluster_net import SimNetwork
from simulator.network.flows import FlowNetwork

__all__ = ["FlowNetwork", "SimNetwork"]
