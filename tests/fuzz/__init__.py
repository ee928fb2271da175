"""The HA path's fuzzer (issue 24, item 5): traffic, invariants and the run loop."""
