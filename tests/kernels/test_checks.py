"""kernels/_checks.py: the index-check policy (Note [Index checks]) and the shared checks."""

import pytest
import torch

from autofunc.kernels._checks import CHECKS_ENV, check_index_values, index_checks_enabled

# (AUTOFUNC_KERNEL_CHECKS, device of the indices) -> do the launchers check index values?
# "meta" stands in for a GPU: anything but the CPU, where reading values costs a device sync.
POLICY = [
    (None, "cpu", True),
    (None, "meta", False),
    ("auto", "cpu", True),
    ("auto", "meta", False),
    ("1", "meta", True),
    ("1", "cpu", True),
    ("0", "cpu", False),
    ("0", "meta", False),
]


@pytest.mark.parametrize("mode, device, expected", POLICY)
def test_index_checks_enabled(mode, device, expected, monkeypatch):
    if mode is None:
        monkeypatch.delenv(CHECKS_ENV, raising=False)
    else:
        monkeypatch.setenv(CHECKS_ENV, mode)
    assert index_checks_enabled(torch.empty(3, device=device)) is expected


def test_index_checks_bad_mode(monkeypatch):
    monkeypatch.setenv(CHECKS_ENV, "yes")
    with pytest.raises(ValueError, match=f"{CHECKS_ENV}='yes' is not a valid mode"):
        index_checks_enabled(torch.empty(3))


def test_check_index_values_names_first_bad_position():
    table = torch.tensor([[0, 1, 2], [3, 9, 8]])
    check_index_values("op", "table", table, table > 9, "ids are <= 9")  # nothing bad: no error
    with pytest.raises(ValueError, match=r"op: table\[1, 1\] = 9 is invalid: ids are < 8"):
        check_index_values("op", "table", table, table >= 8, "ids are < 8")
