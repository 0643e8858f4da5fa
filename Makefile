# The two commands of the quick start. Both set up everything they need themselves.
PORT ?= 8000
ARGS ?=

.PHONY: run test

run:
	PORT=$(PORT) bin/run

test:
	bin/test $(ARGS)
