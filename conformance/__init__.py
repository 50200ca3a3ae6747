"""The conformance suite: prove that a storage backend stays correct.

(Being built: see the conformance issue.)
"""
