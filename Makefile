PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench-ckpt clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip >/dev/null

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -e '.[test,bench]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/misa demo

test: $(STAMP)
	$(BIN)/python -m pytest

bench-ckpt: $(STAMP)
	$(BIN)/misa bench ckpt

clean:
	rm -rf $(VENV) build *.egg-info
