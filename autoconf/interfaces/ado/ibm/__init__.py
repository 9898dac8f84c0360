"""IBM ado-autoconf 2.1.2's public modules, answered by autoconf's estimators (docs/dialects.md §3).

``autoconf/__init__.py`` aliases IBM's import paths here: ``autoconf.min_gpu_recommender``,
``autoconf.throughput_recommender``, ``autoconf.model_paths`` and ``autoconf.utils`` (config mapper,
JobConfig, rule-based classifier, recommender). Signatures, argument names, defaults and return shapes are
IBM's; the classifier and regressor they call are autoconf's estimators behind IBM's ``predict``
contract (``engine.py``), unless the caller trained IBM's own model into IBM's model folder. Nothing
here is registered with ado: the ado experiments are ``autoconf.interfaces.ado.experiments``.
"""
