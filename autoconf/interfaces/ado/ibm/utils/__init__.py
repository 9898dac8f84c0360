"""IBM ado-autoconf's ``autoconf.utils``: model-name mapper, JobConfig, rule-based classifier, recommender."""
