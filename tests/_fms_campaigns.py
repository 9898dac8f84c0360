"""The scored fms-acceleration rows by campaign, for the tests of the stack releases the rows carry."""

from __future__ import annotations

from typing import Any

import pandas as pd

from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.schema import Job


def fms_campaigns() -> tuple[pd.DataFrame, dict[str, Job], Any]:
    """The scored fms-acceleration rows, the Job of each campaign's first row (as ``row_to_inputs`` maps it) and
    each row's campaign date (the ``@YYYY-MM-DD:`` of its campaign)."""
    rows = load_measurements()
    fms = rows[(rows.source == "fms-acceleration") & (rows.scored == 1)]
    first = {str(c): row_to_inputs(r)[0] for c, r in fms.groupby("campaign").first().assign(campaign=lambda d: d.index).iterrows()}
    dated = pd.to_datetime(fms.campaign.str.extract(r"@([\d-]+):")[0])
    return fms, first, dated
