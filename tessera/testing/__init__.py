"""Testing tools that ship with tessera: the fuzzer (`python -m tessera.testing.fuzz`)."""
