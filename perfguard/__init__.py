"""perfguard: keep the attention implementations in ``attention/`` correct and fast.

Data flows one way: ``machine`` -> ``timing`` / ``work`` -> (the asv suite, run by ``round_worker``)
-> ``rounds`` -> ``store`` -> ``compare``/``stats`` -> ``report``.  ``measuring`` (a bench: what
run, check, calibrate and bisect measure with) and ``gate`` (the PR check) wire them together as a
library; ``cli`` only parses options, calls them and prints.
"""

__version__ = "0.1.0"
