"""Builders shared by the serial tests and the tests under mpiexec (tests/mpi): models, data and training
runs that both sides compare. Tests import these, never another test file."""
