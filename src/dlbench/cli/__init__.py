"""The commands: each ``dlbench`` verb parses its flags, calls :mod:`dlbench.api` or the layer
below, and prints (:mod:`dlbench.cli.main` holds the parser and ``main``).
"""
