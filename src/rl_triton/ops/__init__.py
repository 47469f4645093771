"""Public estimators, one module per family (``gae``, ``vtrace``, ``retrace``, ``returns``, ``prefix_sum``)."""
