# Two commands do all set-up on a fresh machine: `make app` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: app test info models figures site notebooks notebook-outputs slides handout gp-sweep gp-study gp-rates lm-sweep lm-rates lm-own lm-ladder lm-budget-ladder lm-tie-ladder gp-test-time lm-test-time docs clean

$(BIN)/.runtime: requirements.txt requirements-assets.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-assets.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(BIN)/.dev: $(BIN)/.runtime requirements-dev.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

app: $(BIN)/.runtime          ## launch the Streamlit app on its defaults (port 8501; another: make app PORT=8600)
	MALLOC_ARENA_MAX=$${MALLOC_ARENA_MAX:-2} $(BIN)/python -m streamlit run app.py $(if $(PORT),--server.port $(PORT))

test: $(BIN)/.dev             ## run the whole test suite
	$(BIN)/python -m pytest

info: $(BIN)/.runtime         ## parameter table at GPT-2-small-like sizes
	$(BIN)/python -m cem_core info --d-model 768 --n-layers 12 --n-heads 12 --d-ff 2048

models: $(BIN)/.runtime       ## retrain the trained models in models/ that are missing or stale (about 18 min on 2 cores)
	$(BIN)/python -m cem_core models train

figures: $(BIN)/.runtime      ## regenerate figures/ from the committed results
	$(BIN)/python -m cem_core figures --out figures

site: $(BIN)/.runtime         ## the energy explorer as a static site that needs no install: build/site/index.html (docs/site.md)
	$(BIN)/python -m cem_core site $(if $(OUT),--out $(OUT))

notebooks: $(BIN)/.runtime    ## open the SymPy derivation notebooks in JupyterLab (as root too: containers, lab machines)
	$(BIN)/python -m jupyter lab notebooks/ $(LAB_ARGS) $(if $(filter 0,$(shell id -u)),--allow-root)

slides: $(BIN)/.runtime       ## the lecture as a reveal.js deck that opens offline: build/slides/00_lecture.slides.html
	$(BIN)/python notebooks/publish.py slides $(if $(OUT),--out $(OUT))

handout: $(BIN)/.runtime      ## the lecture as a printable PDF of at most 4 pages (Debian's chromium): build/handout/
	$(BIN)/python notebooks/publish.py handout $(if $(OUT),--out $(OUT))

notebook-outputs: $(BIN)/.runtime    ## execute the notebooks and commit-ready .ipynb with outputs (prints each one's time)
	$(BIN)/python notebooks/execute.py --write

gp-sweep: $(BIN)/.runtime     ## rerun (resume) the default GP sweep into results/gp-default
	$(BIN)/python -m cem_core gp sweep --out results/gp-default --preset default

gp-study: $(BIN)/.runtime     ## the GP factor study: the plateau probe, then the study (about two hours on 2 cores)
	$(BIN)/python -m cem_core gp sweep --out results/gp-plateau --preset plateau
	$(BIN)/python -m cem_core gp sweep --out results/gp-study --preset study --reuse results/gp-default

gp-rates: $(BIN)/.runtime     ## the GP rate check: CEM attention at T = 1 and 8 x three rates (about 10 min on 2 cores)
	$(BIN)/python -m cem_core gp sweep --out results/gp-rates --preset rates --reuse results/gp-study

lm-sweep: $(BIN)/.runtime     ## rerun (resume) the LM claims sweep into results/lm-default (about 1 hour on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-default --preset default

lm-rates: $(BIN)/.runtime     ## rerun (resume) each variant's learning-rate grid into results/lm-rates (70 min on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-rates --preset rates --jobs 2

lm-own: $(BIN)/.runtime       ## rerun (resume) each variant at its own rate into results/lm-own (about 2 hours on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-own --preset own --rates-from results/lm-rates --jobs 2

lm-ladder: $(BIN)/.runtime    ## rerun (resume) the quarter-budget width ladder into results/lm-ladder (about 50 min on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-ladder --preset ladder --rates-from results/lm-rates --jobs 2
lm-budget-ladder: $(BIN)/.runtime    ## rerun (resume) the width ladder at the paper's budget into results/lm-budget-ladder (about 3 h on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-budget-ladder --preset budget-ladder --rates-from results/lm-ladder --jobs 2
lm-tie-ladder: $(BIN)/.runtime       ## rerun (resume) the tie ladder into results/lm-tie-ladder (about 3.5 h on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-tie-ladder --preset tie-ladder --rates-from results/lm-budget-ladder --reuse results/lm-budget-ladder --jobs 2
gp-test-time: $(BIN)/.runtime        ## rerun (resume) the GP test-time study into results/gp-test-time (about 40 min on 2 cores)
	$(BIN)/python -m cem_core gp sweep --out results/gp-test-time --preset test-time --reuse results/gp-study results/gp-default --jobs 2
lm-test-time: $(BIN)/.runtime        ## rerun (resume) the LM test-time study into results/lm-test-time (about 20 min on 2 cores)
	$(BIN)/python -m cem_core lm sweep --out results/lm-test-time --preset test-time --jobs 2
docs: $(BIN)/.runtime                ## rewrite the generated tables of docs/ from the committed results
	$(BIN)/python -m cem_core docs

clean:
	rm -rf $(VENV) .pytest_cache
