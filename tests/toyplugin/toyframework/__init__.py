"""A framework folder outside dlbench, as a new contributor writes one (docs/architecture.md, "How to add
a framework"): this declaration, a ``backend.py`` and a ``decoder.py``. It is torch underneath, offering
the forward closure only and a greedy decoder. Its distribution (``tests/toyplugin/pyproject.toml``)
registers it through the ``dlbench.frameworks`` entry point ``toyfw = "toyframework:DECLARATION"``; its
parts are named relative to this package, wherever it is installed."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="toyfw", distribution="torch", import_name="torch", description="a toy framework folder (torch inside)",
    variants=("eager",), closures=("forward",), decoder="decoder:ToyDecoder")
