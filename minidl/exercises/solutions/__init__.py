"""The exercises' reference solutions: ``python -m minidl.exercises check NAME --solution`` checks one.
No checker imports these files; only the hidden tier's hash maker (``hashes.make``) runs them."""
