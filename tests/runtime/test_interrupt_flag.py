"""The hook that clears CPython's unhandled-Ctrl-C flag once a command has handled the interrupt
(:mod:`crfkit._runtime.interrupt`)."""

from __future__ import annotations

import ctypes

import pytest

from crfkit._runtime.interrupt import forget_handled_interrupt


def _flag():
    try:
        return ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except ValueError:
        pytest.skip("this Python has no _Py_UnhandledKeyboardInterrupt")


def test_the_flag_is_cleared():
    flag = _flag()
    flag.value = 1
    try:
        assert forget_handled_interrupt() is True
        assert flag.value == 0
    finally:
        flag.value = 0


def test_the_switch_leaves_the_flag_alone(monkeypatch):
    flag = _flag()
    monkeypatch.setenv("CRFKIT_NO_INTERRUPT_RESET", "1")
    flag.value = 1
    try:
        assert forget_handled_interrupt() is False
        assert flag.value == 1
    finally:
        flag.value = 0
