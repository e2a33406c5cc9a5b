"""The property-test kit's parts; ``collectives.testing`` is its public face.

cases.py    Case, each rank's data, the hypothesis strategies for ranks, sizes, dtypes, ops, layouts
spec.py     the collectives: the user's signature, each rank's arrays, the answer
run.py      run one case on in-process ranks and check every property (PROPERTIES, Cost)
search.py   the domain, uniform draws, greedy shrinking; ``cases(collective)``, the whole-case strategy
report.py   the shrunk failure's report: inputs, expected against got, step table, space-time diagram
mpi.py      the same properties on a real MPI communicator (``python -m collectives.check --mpi``)
"""
