"""perfguard: keep the attention implementations in ``attention/`` correct and fast.

Data flows one way: ``machine`` -> ``timing`` -> (asv suites) -> ``asvrun`` -> ``store`` ->
``compare``/``stats`` -> ``report``; ``cli`` is the only place that wires them together.
"""

__version__ = "0.1.0"
