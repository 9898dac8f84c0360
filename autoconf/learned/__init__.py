"""Learned estimators: AutoGluon predictors of measured/theory ratios, versioned in AutoGluonModels/.

Importing this package imports neither AutoGluon nor LightGBM: only ``train.py`` and ``build.py``
(fitting) and the optional AutoGluon backend of ``model.py`` do; predictions use the numpy copies
of the trained trees (``fastpath.py``).
"""
