"""The engines of the commands that plan and run things over the API: the search over releases
(``bisect.py``; its stored state is ``report/bisection.py``), the reproduction of a published figure
(``reproduce.py``) and the framework probes (``probe.py``). Above the API, below ``cli/``."""
