"""MPI collectives written on point-to-point calls, one algorithm per file."""
