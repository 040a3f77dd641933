"""A framework folder outside dlbench, as a new contributor writes one (docs/architecture.md, "How to add
a framework"): this declaration, a ``backend.py`` and a ``decoder.py``. It is torch underneath, offering
the forward closure only and a greedy decoder; ``DLBENCH_PLUGINS=tests/toyframework`` registers it."""

from dlbench.frameworks.declaration import Declaration

DECLARATION = Declaration(
    name="toyfw", distribution="torch", import_name="torch", description="a toy framework folder (torch inside)",
    variants=("eager",), closures=("forward",), decoder="decoder:ToyDecoder")
#: what DLBENCH_PLUGINS reads; a built-in folder's ``__init__`` holds only DECLARATION
FRAMEWORK_INFO = DECLARATION
