"""The global function registry."""

import pytest

from tessera.runtime import get_global_func, list_global_func_names, register_func
from tessera.runtime.registry import remove_global_func


def test_register_forms_and_lookup():
    @register_func
    def test_registry_plain(x):
        return x + 1

    @register_func("test.registry.named")
    def named(x):
        return x * 2

    register_func("test.registry.direct", lambda: "direct")
    try:
        assert get_global_func("test_registry_plain")(1) == 2
        assert get_global_func("test.registry.named")(3) == 6
        assert get_global_func("test.registry.direct")() == "direct"
        names = list_global_func_names()
        assert {"test_registry_plain", "test.registry.named", "test.registry.direct"} <= set(names)
        assert names == sorted(names)
    finally:
        for name in ("test_registry_plain", "test.registry.named", "test.registry.direct"):
            remove_global_func(name)
    assert get_global_func("test.registry.named", allow_missing=True) is None


def test_duplicates_need_override():
    register_func("test.registry.dup", lambda: 1)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_func("test.registry.dup", lambda: 2)
        assert get_global_func("test.registry.dup")() == 1
        register_func("test.registry.dup", lambda: 3, override=True)
        assert get_global_func("test.registry.dup")() == 3
    finally:
        remove_global_func("test.registry.dup")


def test_errors():
    with pytest.raises(ValueError, match="no global function named 'test.registry.missing'"):
        get_global_func("test.registry.missing")
    with pytest.raises(ValueError, match="no global function"):
        remove_global_func("test.registry.missing")
    with pytest.raises(TypeError, match="expected a callable"):
        register_func("test.registry.bad", 3)
    with pytest.raises(TypeError, match="expected a name or a function"):
        register_func(3)
