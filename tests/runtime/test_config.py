"""Configuration from the environment, and building the runtime library into the cache."""

import os

import pytest

from tessera.runtime import config, native


def test_num_threads(monkeypatch):
    monkeypatch.delenv("TESSERA_NUM_THREADS", raising=False)
    assert config.num_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("TESSERA_NUM_THREADS", "3")
    assert config.num_threads() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("TESSERA_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="TESSERA_NUM_THREADS"):
            config.num_threads()


def test_cache_dir_is_created(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "a" / "b"))
    assert config.cache_dir() == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


def test_log_level_and_compiler(monkeypatch):
    monkeypatch.delenv("TESSERA_LOG_LEVEL", raising=False)
    assert config.log_level() == "WARNING"
    monkeypatch.setenv("TESSERA_LOG_LEVEL", "debug")
    assert config.log_level() == "DEBUG"
    monkeypatch.setenv("TESSERA_LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="TESSERA_LOG_LEVEL"):
        config.log_level()
    monkeypatch.setenv("CC", "clang")
    assert config.c_compiler() == "clang"
    monkeypatch.delenv("CC")
    assert config.c_compiler() == "cc"


def test_library_is_built_once_per_source(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    path = native.library_path()
    assert path.parent == tmp_path and path.name.startswith("tessera_rt-")
    mtime = path.stat().st_mtime_ns
    assert native.library_path() == path and path.stat().st_mtime_ns == mtime
    # no temporary files left: the library and the secret that signs it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret", path.name]


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(RuntimeError, match="no C compiler found: 'no-such-compiler-xyz'"):
        native.library_path()
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]  # no library, no temporary file


def test_symbol_addresses_are_the_loaded_functions():
    import ctypes

    addresses = native.symbol_addresses()
    assert set(addresses) == set(native.SYMBOLS) and all(addresses.values())
    get = ctypes.CFUNCTYPE(ctypes.c_int32)(addresses["tessera_get_num_threads"])
    assert get() == native.get_num_threads()
