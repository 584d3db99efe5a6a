"""The chaos suite: many runs on a three-node cluster while processes and nodes fail.

``python -m tests.chaos --help`` runs the long version; ``test_chaos.py`` a short one.
"""
