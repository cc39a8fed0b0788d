# Targets CI uses too (.ci/run = ROCMENV_REQUIRE_ENGINE=1 scripts/test.sh).
VENV := .venv/bin

.PHONY: setup test lint format demo ci mutation explore

setup:          ## install packages, start dockerd + registries, build the test images
	scripts/setup.sh

test:           ## setup, then pytest + ruff + mypy (pass pytest args: make test ARGS='-k tags')
	scripts/test.sh $(ARGS)

lint:           ## ruff check, ruff format --check, mypy
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy

format:         ## apply ruff's fixes and formatting
	$(VENV)/ruff check --fix .
	$(VENV)/ruff format .

demo:           ## the README demo (rocmenv run with the shim in an old-aiter image)
	scripts/demo.sh

ci:             ## what CI runs
	.ci/run

mutation:       ## mutation scores of the modules that guard users (slow; not in CI): make mutation ARGS='settings lock'
	$(VENV)/python scripts/mutation.py $(ARGS)

explore:        ## the property tests, longer and with fresh randomness (CI runs them derandomised)
	ROCMENV_HYPOTHESIS=explore $(VENV)/pytest -q -p no:cacheprovider tests/unit
