"""Stack drivers of the traced estimator: a framework's own training code run on fake tensors.

``unsupported.py`` (no torch) decides what can be traced; ``memory.py`` (no torch) runs a driver in a subprocess
and turns its summary into a MemoryEstimate; each ``<stack>_step.py`` is a driver that imports its stack (optional
extra ``[stacks]``).
"""
