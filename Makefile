PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint format readme-plot bench-plots bench-ckpt kafka-jars clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip >/dev/null

# `make run` installs what running needs; `make test` adds the test and benchmark extras.
$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -e '.[test,bench]'
	touch $(TEST_STAMP)

# The Kafka broker's jars (services/kafka_broker.py) and Spark's Kafka connector, resolved from Maven Central by
# conf/kafka/pom.xml and conf/kafka/connector-pom.xml into git-ignored folders; again only when a build file
# changes. Jobs and tests never fetch them.
KAFKA_JARS := .kafka/broker/.resolved
$(KAFKA_JARS): conf/kafka/pom.xml conf/kafka/connector-pom.xml | $(STAMP)
	$(BIN)/python -m services.kafka_install
	touch $@

kafka-jars: $(KAFKA_JARS)

RUN := runs/cm2
SOURCE ?= kafka
KAFKA := $(BIN)/misa kafka
SUBMIT := PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python PYSPARK_DRIVER_PYTHON=$(CURDIR)/$(BIN)/python \
	$(BIN)/spark-submit --master 'local[2]' --conf spark.ui.enabled=false \
	--conf spark.ui.showConsoleProgress=false \
	--jars "$$(ls $(CURDIR)/.kafka/connector/*.jar | paste -sd, -)" \
	--driver-java-options -Dlog4j2.configurationFile=file:$(CURDIR)/conf/log4j2.properties

# The same Cluster Monitoring input, CM2 through the MiSA runtime (misa mode) and in Spark's tuned native
# mode (its RocksDB state store as its documentation advises), both appending to one metrics file;
# then their outputs checked equal batch by batch (no ratio from runs that differ), the two side by side
# without their warm-up batches, and the plots. The input is a topic of 4
# partitions keyed by job on the project's own Kafka broker, 3,000 records a batch; `make run SOURCE=files`
# reads the generator's folder instead, 2 files (2 s of event time) a batch.
CM2 := jobs/cluster_monitoring.py --query cm2 --available-now --metrics $(RUN)/metrics.jsonl
CM2_files := --input $(RUN)/input --max-files-per-trigger 2
CM2_kafka := --kafka "$$($(KAFKA) up)" --topic cm2 --max-offsets-per-trigger 3000
run: $(STAMP) $(KAFKA_JARS)
	rm -rf $(RUN)
	$(BIN)/misa gen cm --out $(RUN)/input --rate 1500 --seconds 48 --jobs 3000 --late-fraction 0.1 --lateness 12s
ifeq ($(SOURCE),kafka)
	$(KAFKA) up
	$(KAFKA) produce $(RUN)/input --topic cm2 --replace --partitions 4 --key-field job_id
endif
	$(SUBMIT) $(CM2) $(CM2_$(SOURCE)) --mode misa --output $(RUN)/misa/output \
		--checkpoint $(RUN)/misa/checkpoint
	$(SUBMIT) $(CM2) $(CM2_$(SOURCE)) --mode native --output $(RUN)/native/output \
		--checkpoint $(RUN)/native/checkpoint
	$(BIN)/python -m bench.same_output $(RUN)/misa/output $(RUN)/native/output
	$(BIN)/misa report $(RUN)/metrics.jsonl --out $(RUN)/report
	@echo "A small run (about 9,000 state keys, input read at once): Spark's own work per batch dominates both" \
		"modes. The large-state results are in docs/benchmarks/ (CM2 live with a million keys: live.md)." \
		"The broker stays up for the next run: $(KAFKA) down stops it."

test: lint $(KAFKA_JARS)
	$(BIN)/python -m pytest

# ruff (settings in pyproject.toml): lint and the format check; `make format` rewrites the files.
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(TEST_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The generated reference pages, docs/configuration.md (the spark.misa.* keys) and docs/cli.md (the misa command,
# every sub-command the installed entry points add): rewritten from the code; a test fails when they differ.
.PHONY: docs
docs: $(STAMP)
	$(BIN)/python -m misa.docs_gen

# The README's picture: make run's batch latency over time (misa against Spark's store), copied under docs/.
readme-plot:
	cp $(RUN)/report/latency_timeline.png docs/img/make-run-latency.png

# The benchmark pages' plots, drawn from their tables (docs/benchmarks/img/).
bench-plots: $(TEST_STAMP)
	$(BIN)/misa bench plots

bench-ckpt: $(TEST_STAMP)
	$(BIN)/misa bench ckpt

clean:
	rm -rf $(VENV) build *.egg-info
