"""The runtime allocator's block cache (Note [block cache] in native/tessera_rt.c): large
blocks freed by a kernel are handed out again instead of going back to the OS."""

import ctypes

from tessera.runtime import native


def test_large_blocks_are_reused_and_aligned():
    lib = native.load()
    size = (3 << 20) + 4160  # an odd size: no block other tests cached fits it better
    a = lib.tessera_alloc(size)
    assert a and a % 64 == 0
    ctypes.memset(a, 7, size)  # the whole block is usable
    lib.tessera_free(a)
    b = lib.tessera_alloc(size)
    assert b == a
    c = lib.tessera_alloc(size)  # the cached block is taken: a new one
    assert c and c != b and c % 64 == 0
    lib.tessera_free(b)
    lib.tessera_free(c)


def test_small_and_much_smaller_requests_get_their_own_blocks():
    lib = native.load()
    big = lib.tessera_alloc(8 << 20)
    lib.tessera_free(big)
    small = lib.tessera_alloc(1 << 20)  # 8x smaller: not handed the 8 MiB block
    assert small != big and small % 64 == 0
    tiny = lib.tessera_alloc(100)
    assert tiny and tiny % 64 == 0
    lib.tessera_free(small)
    lib.tessera_free(tiny)
    lib.tessera_free(None)  # a no-op, as free(NULL)
