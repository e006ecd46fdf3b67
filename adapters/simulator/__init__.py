"""Stand-ins for what a development machine lacks: a model hub, catalog objects, nodes.

Used by the tests and the local demo; nothing here runs in a production cluster.
"""
