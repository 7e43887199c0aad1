"""--cache_images: decode once, the same images, a memory limit."""

import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import image_cache, preprocessing, training
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET
from cosine_metric_learning.errors import TrainingError, UsageError
from tests.conftest import read_events, small_config

SHAPE = (128, 64, 3)


@pytest.fixture
def files(market_dir, tmp_path):
    """Real JPEG files: training images, one of another size (resized),
    one truncated and one that is not an image."""
    paths = sorted(glob.glob(os.path.join(market_dir, "bounding_box_train",
                                          "*.jpg")))[:20]
    big = str(tmp_path / "big.jpg")
    Image.open(paths[0]).resize((100, 230)).save(big)
    truncated = str(tmp_path / "truncated.jpg")
    shutil.copy(paths[1], truncated)
    with open(truncated, "r+b") as f:
        f.truncate(300)
    text = str(tmp_path / "notes.jpg")
    with open(text, "w") as f:
        f.write("not an image")
    return paths[:5] + [big, truncated] + paths[5:] + [text]


def test_the_cache_holds_exactly_what_the_producers_decode(files, caplog):
    with caplog.at_level("INFO", logger="absl"):
        images, kept = image_cache.fill(np.array(files), SHAPE, max_gb=1.0,
                                        max_unreadable=2)
    assert list(kept) == [i for i in range(len(files))
                          if i not in (6, len(files) - 1)]
    assert images.dtype == np.uint8 and images.shape == (len(kept),) + SHAPE
    for row, index in enumerate(kept):
        expected = preprocessing.read_image(tf.constant(files[index]),
                                            SHAPE).numpy()
        np.testing.assert_array_equal(images[row], expected)
    messages = [r.getMessage() for r in caplog.records]
    assert (f"Caching {len(files)} training images at 128x64: 0.00 GB in "
            "memory (limit 1 GB)") in messages
    skipped = [m for m in messages if m.startswith("Skipping unreadable")]
    assert len(skipped) == 2 and any("truncated.jpg" in m for m in skipped)


def test_too_many_unreadable_images_stop_the_cache(files):
    with pytest.raises(TrainingError, match="2 training images are "
                       "unreadable, more than the 1 allowed"):
        image_cache.fill(np.array(files), SHAPE, max_gb=1.0,
                         max_unreadable=1)


def test_the_memory_limit_is_one_line_before_any_work(market_dir, tmp_path):
    config = small_config(market_dir, tmp_path, cache_images=True,
                          cache_max_gb=0.001)
    with pytest.raises(UsageError) as error:
        training.train(MARKET, config)
    message = str(error.value)
    assert "GB at 128x64, more than --cache_max_gb=0.001" in message
    assert "\n" not in message
    # nothing of the run is written: no run.json pins its settings
    assert not os.path.exists(config.run_dir)
    # so the same --run_id trains with another loss afterwards
    other = small_config(market_dir, tmp_path, loss_mode="cosine-softmax",
                         number_of_steps=1)
    assert training.train(MARKET, other).step == 1


@pytest.mark.slow
def test_training_from_the_cache_is_never_starved(market_dir, tmp_path):
    config = small_config(market_dir, tmp_path, cache_images=True,
                          number_of_steps=6, save_summaries_secs=0.01,
                          log_interval_secs=0.01)
    result = training.train(MARKET, config)
    assert result.step == 6
    acc = read_events(config.run_dir)
    starved = [float(tf.make_ndarray(e.tensor_proto))
               for e in acc.Tensors("queue/starved_fraction")]
    produced = [float(tf.make_ndarray(e.tensor_proto))
                for e in acc.Tensors("queue/enqueue_images_per_second")]
    assert len(starved) >= 5 and max(starved) == 0.0
    assert max(produced) > 0
