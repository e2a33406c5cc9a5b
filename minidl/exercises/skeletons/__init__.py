"""The exercises' skeletons, as shipped: ``python -m minidl.exercises start NAME`` copies one to exercises/."""
