"""Peer frameworks on the overhead workloads: each module has ``version()`` and ``run(dag)``."""
