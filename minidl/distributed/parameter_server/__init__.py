"""The parameter server: server ranks hold the parameters, workers push gradients and pull parameters.

``protocol.py`` (the messages, the roles, the shards, the statistics), ``server.py``
(``ParameterServer.serve()``), ``worker.py`` (``PSWorker``, ``collect_parameters``).
"""

from minidl.distributed.parameter_server.protocol import ServerStats, is_server
from minidl.distributed.parameter_server.server import ParameterServer
from minidl.distributed.parameter_server.worker import PSWorker, collect_parameters

__all__ = ["ParameterServer", "PSWorker", "ServerStats", "collect_parameters", "is_server"]
