# The two set-up commands: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_DIR ?= demo
DEMO_STEPS ?= 400

export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: install test demo benchmark clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest -q

demo: install
	rm -rf $(DEMO_DIR)/output/cosine-softmax
	$(PY) -m datasets.synthetic --layout=market1501 \
		--output_dir=$(DEMO_DIR)/Market-1501-synthetic
	$(PY) train_market1501.py --dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--log_dir=$(DEMO_DIR)/output --run_id=cosine-softmax \
		--loss_mode=cosine-softmax --batch_size=32 \
		--number_of_steps=$(DEMO_STEPS) --save_summaries_secs=20
	@echo
	@echo "Synthetic dataset:  $(DEMO_DIR)/Market-1501-synthetic"
	@echo "Checkpoints:        $$(ls $(DEMO_DIR)/output/cosine-softmax/*.index | sed 's/.index//' | tr '\n' ' ')"
	@echo "TensorBoard:        $(VENV)/bin/tensorboard --logdir $(DEMO_DIR)/output"

benchmark: install
	$(PY) benchmarks/input_pipeline.py

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
