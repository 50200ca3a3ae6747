"""Deliberately broken storage adapters, each wrong in exactly one way.

They prove that the conformance suite finds real bugs: ``test_broken_adapters``
runs the suite against each and checks that it fails in the test named for
that bug, while :class:`IOMemoryStorage` (the same code without the bug)
passes.
"""
