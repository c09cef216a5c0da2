"""autofunc's Inductor backend under its public name: the post-grad pass and the reports.

The code lives in ``autofunc.backends.inductor`` (``glue``); this module keeps the names users
import (``collect_reports``, ``last_reports``, ``ReinplacePass``, ``install_pass``,
``uninstall_pass``, ``run_pass``). Importing it imports Inductor.
"""

from .backends.inductor.glue import (
    ReinplacePass,
    collect_reports,
    install_pass,
    last_reports,
    run_pass,
    uninstall_pass,
)

__all__ = [
    "ReinplacePass",
    "collect_reports",
    "install_pass",
    "last_reports",
    "run_pass",
    "uninstall_pass",
]
