"""ONNX, OpenVINO and TFLite exports, int8, the encoder over every backend, and a
real tracker fed by it (the ``deploy`` extra)."""

import glob
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

from cosine_metric_learning import deploy, protocol
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets.spec import MARKET1501 as MARKET
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.conftest import ROOT, WITHOUT_VNNI, one_error_line, run_script
from tests.reference import keras_features, kit_reference, rank1_interval

pytestmark = pytest.mark.slow


def _crops(directory, count, seed=0):
    """uint8 BGR crops of real JPEG files, as OpenCV would read them."""
    paths = sorted(glob.glob(os.path.join(directory, "*.jpg")))
    chosen = np.random.default_rng(seed).choice(len(paths), count,
                                                replace=count > len(paths))
    return np.stack([np.asarray(Image.open(paths[i]).convert("RGB"))[..., ::-1]
                     for i in chosen])


@pytest.fixture(scope="module")
def exports(trained, tmp_path_factory):
    """The trained encoder as .onnx and OpenVINO IR (float32)."""
    _, encoder = trained
    directory = tmp_path_factory.mktemp("deploy")
    onnx = deploy.write_onnx(encoder, str(directory / "m.onnx"), (128, 64, 3))
    xml = deploy.write_openvino(encoder, str(directory / "m.xml"),
                                (128, 64, 3))
    return onnx, xml


def test_every_backend_gives_the_keras_features(trained, exports,
                                                market_dir, tmp_path):
    _, encoder = trained
    onnx, xml = exports
    crops = _crops(os.path.join(market_dir, "bounding_box_test"), 64)
    expected = keras_features(encoder, crops)
    throughput = {"INFERENCE_PRECISION_HINT": "f32",
                  "PERFORMANCE_HINT": "THROUGHPUT"}  # batches split
    for path, backend, config in ((onnx, "auto", None),
                                  (onnx, "openvino", None),
                                  (xml, "auto", None), (xml, "auto",
                                                        throughput)):
        loaded = encoder_lib.load(path, batch_size=64, backend=backend,
                                  openvino_config=config)
        assert loaded.backend == ("onnxruntime" if backend == "auto" and
                                  path == onnx else "openvino")
        assert loaded.image_shape == (128, 64, 3) and loaded.feature_dim == 128
        for batch in (1, 7, 64):
            features = loaded(crops[:batch])
            assert features.shape == (batch, 128), (path, backend, batch)
            assert np.abs(features - expected[:batch]).max() < 1e-4, \
                (path, backend, batch)
    # TFLite on LiteRT: the batch is dynamic
    tflite = deploy.write_tflite(encoder, str(tmp_path / "m.tflite"),
                                 (128, 64, 3))
    loaded = encoder_lib.load(tflite, batch_size=64)
    assert loaded.backend == "litert" and loaded.image_shape == (128, 64, 3)
    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=tflite).get_signature_runner()
    inputs, outputs = runner.get_input_details(), runner.get_output_details()
    assert list(inputs) == ["images"] and list(outputs) == ["features"]
    assert inputs["images"]["dtype"] == np.uint8
    assert list(inputs["images"]["shape_signature"]) == [-1, 128, 64, 3]
    assert outputs["features"]["dtype"] == np.float32
    for batch in (1, 7, 64, 1):
        assert np.abs(loaded(crops[:batch]) - expected[:batch]).max() < 1e-4


def test_exports_keep_the_frozen_graph_contract(exports):
    import onnx
    import openvino
    model = onnx.load(exports[0])
    (inputs,), (outputs,) = model.graph.input, model.graph.output
    assert inputs.name == "images" and outputs.name == "features"
    assert inputs.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    dims = inputs.type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [128, 64,
                                                                     3]
    ir = openvino.Core().read_model(exports[1])
    assert ir.input().get_any_name() == "images"
    assert ir.input().get_partial_shape()[0].is_dynamic
    assert ir.input().get_element_type() == openvino.Type.u8
    assert os.path.getsize(exports[1][:-4] + ".bin") > 4e6  # float32, not f16


def test_predict_takes_crops_of_any_size_like_the_box_encoder(trained,
                                                              exports):
    loaded = encoder_lib.load(exports[0])
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
    # boxes already at the patch's 1:2 aspect, inside the frame: the box
    # encoder cuts exactly these pixels
    boxes = [(10, 20, 40, 80), (100, 30, 60, 120), (200, 100, 25, 50)]
    crops = [frame[y:y + h, x:x + w] for x, y, w, h in boxes]
    vectors = loaded.predict(crops)
    assert isinstance(vectors, list) and len(vectors) == 3
    expected = encoder_lib.create_box_encoder(loaded)(frame, boxes)
    assert np.abs(np.stack(vectors) - expected).max() < 1e-6
    assert loaded.predict([]) == []
    with pytest.raises(UsageError, match="crop 1 of dtype float32"):
        loaded.predict([crops[0], crops[1].astype(np.float32)])


def test_a_tracker_follows_people_with_the_embedder(exports, market_dir):
    """deep_sort_realtime (from PyPI) tracks three synthetic people across
    frames with our features as its embeds."""
    from deep_sort_realtime.deepsort_tracker import DeepSort
    loaded = encoder_lib.load(exports[1])
    by_id = {}
    for path in sorted(glob.glob(os.path.join(market_dir,
                                              "bounding_box_test", "*.jpg"))):
        person = os.path.basename(path).split("_")[0]
        if not person.startswith("-") and person != "0000":
            by_id.setdefault(person, path)
    people = [np.asarray(Image.open(p).convert("RGB"))[..., ::-1]
              for p in list(by_id.values())[:3]]
    tracker = DeepSort(max_age=5, n_init=2, embedder=None)
    tracks_of = [set() for _ in people]
    for frame_index in range(8):
        frame = np.full((300, 500, 3), 90, np.uint8)
        boxes = []
        for i, person in enumerate(people):
            x, y = 40 + 150 * i + 6 * frame_index, 60 + 3 * frame_index
            frame[y:y + 128, x:x + 64] = person
            boxes.append([x, y, 64, 128])
        crops = [frame[y:y + h, x:x + w] for x, y, w, h in boxes]
        tracks = tracker.update_tracks(
            [(box, 0.9, "person") for box in boxes],
            embeds=loaded.predict(crops))
        for track in tracks:
            if track.is_confirmed() and track.time_since_update == 0:
                left = track.to_ltwh()[0]
                person = int(np.argmin([abs(left - b[0]) for b in boxes]))
                tracks_of[person].add(track.track_id)
    # each person kept one track from confirmation on, none shared
    assert all(len(ids) == 1 for ids in tracks_of), tracks_of
    assert len(set.union(*tracks_of)) == 3


@pytest.fixture(scope="module")
def cli_exports(trained, market_dir, tmp_path_factory):
    """``--mode=onnx``, ``--mode=onnx --int8``, ``--mode=openvino
    --int8``, ``--mode=tflite`` and ``--mode=tflite --int8`` of the trained
    checkpoint, written by the entry point."""
    checkpoint, _ = trained
    directory = tmp_path_factory.mktemp("cli")
    int8 = ["--int8", "--calibration_images=100",
            f"--dataset_dir={market_dir}"]
    outputs = []
    for mode, output, extra in (("onnx", "m.onnx", []),
                                ("onnx", "m_int8.onnx", int8),
                                ("openvino", "m_int8.xml", int8),
                                ("tflite", "m.tflite", []),
                                ("tflite", "m_int8.tflite", int8)):
        result = run_script("train_market1501.py", f"--mode={mode}",
                            f"--restore_path={checkpoint}",
                            f"--output={directory / output}", *extra)
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"wrote {directory / output}" in result.stdout
        assert ("Calibrating int8 on 100 training images" in result.stderr) \
            == bool(extra)
        outputs.append(str(directory / output))
    return outputs


@pytest.mark.parametrize("isa", ["native", "without VNNI"])
def test_test_mode_measures_the_exported_models(isa, trained, exports,
                                                cli_exports, market_dir,
                                                tmp_path):
    """Every export, float and int8, measured by ``--mode=test`` on this
    processor's kernels and on the AVX2 kernels of processors without VNNI
    (where 8-bit weights saturate the 16-bit sums), in a process of its
    own: the runtimes read the cap when they start.

    What each export must keep is its features: float exports the
    checkpoint's (cosine >= 0.9999), int8 ones within the quantisation's
    error (cosine >= 0.99), all unit-length. Its rank-1 and mAP are not
    bounded by a fixed margin: on 20 queries one query is 0.05, and an
    int8 model may reorder near-ties. Instead the numbers ``--mode=test``
    reports must be the reference metrics of the export's own features,
    and its rank-1 can differ from the checkpoint's only by the queries
    whose first match is within the features' movement of a wrong one
    (:func:`tests.reference.rank1_interval`).
    """
    checkpoint, _ = trained
    onnx, int8_onnx, int8_xml, tflite, int8_tflite = cli_exports
    int8 = [f"{int8_xml}:auto", f"{int8_onnx}:auto",
            f"{int8_onnx}:openvino", f"{int8_tflite}:auto"]
    floats = [f"{onnx}:auto", f"{onnx}:openvino", f"{exports[1]}:auto",
              f"{tflite}:auto"]
    npz = tmp_path / "features.npz"
    result = run_script("-m", "tests.helpers.int8_features", market_dir,
                        str(npz), checkpoint, *floats, *int8,
                        env=WITHOUT_VNNI if isa != "native" else None)
    assert result.returncode == 0, result.stderr[-3000:]
    models = json.loads(result.stdout.splitlines()[-1])
    features = np.load(npz)
    split = MARKET.read_test(market_dir)
    labels = dict(q_ids=np.asarray(split.query_ids),
                  g_ids=np.asarray(split.gallery_ids),
                  q_cams=np.asarray(split.query_cameras),
                  g_cams=np.asarray(split.gallery_cameras))
    queries = [g[0] for g in split.query_groups]  # one image each
    gallery = [g[0] for g in split.gallery_groups]
    unit = {}
    for index, model in enumerate(models):
        values = features[str(index)].astype(np.float64)
        norms = np.linalg.norm(values, axis=1)
        # the black patch too: every model returns unit-length features
        assert np.abs(norms - 1.0).max() <= 1e-3, (model["model"], norms)
        assert abs(model["black_norm"] - 1.0) <= 1e-3, model
        unit[index] = values / norms[:, None]
    reference = unit[0]
    for index, model in enumerate(models):
        name, numbers = model["model"], model["numbers"]
        values = unit[index]
        cosines = np.sum(values * reference, axis=1)
        assert cosines.min() >= (0.99 if model["model"] in int8
                                 else 0.9999), (name, cosines.min())
        # --mode=test measured this model: its numbers are the kit's loop
        # over its own features
        distances = 1.0 - values[queries] @ values[gallery].T
        expected = kit_reference(distances, ranks=(1, 5), **labels)
        for key in ("rank-1", "rank-5", "mAP", "num_queries"):
            assert numbers[key] == pytest.approx(expected[key], abs=1e-9), \
                (name, key)
        # and its rank-1 is where the features' movement allows: a distance
        # between unit vectors moves by at most the two vectors' movements
        moved = np.linalg.norm(values - reference, axis=1)
        certain, uncertain, count = rank1_interval(
            1.0 - reference[queries] @ reference[gallery].T,
            moved[queries][:, None] + moved[gallery][None, :], **labels)
        assert count == numbers["num_queries"] == 20
        hits = round(numbers["rank-1"] * count)
        assert certain <= hits <= certain + uncertain, (name, certain,
                                                        uncertain, hits)
    # int8 weights: the files are far smaller than the float32 ones
    assert os.path.getsize(int8_xml[:-4] + ".bin") < 0.5 * os.path.getsize(
        exports[1][:-4] + ".bin")
    assert os.path.getsize(int8_onnx) < 0.5 * os.path.getsize(exports[0])
    assert os.path.getsize(int8_tflite) < 0.5 * os.path.getsize(tflite)


# Bad input ----------------------------------------------------------------

def test_a_missing_extra_is_one_line_naming_it(monkeypatch, tmp_path):
    """Each converter and runtime made unimportable, as where the extra is
    not installed (the entry points print the UsageError as one line)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "m.xml").write_text("")
    for module, call in (
            ("tf2onnx", lambda: deploy.check_onnx_output("m.onnx")),
            ("openvino", lambda: deploy.check_openvino_output("m.xml")),
            ("nncf", lambda: deploy.quantize(None, [])),
            ("onnxruntime", lambda: deploy.quantize_onnx(None, [])),
            ("onnxruntime", lambda: encoder_lib.load("m.onnx")),
            ("openvino", lambda: encoder_lib.load("m.xml"))):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, module, None)
            with pytest.raises(UsageError) as error:
                call()
        message = str(error.value)
        assert f"'{module}'" in message and ".[deploy]" in message, message
        assert "\n" not in message


def test_test_mode_reads_the_images_at_an_exported_models_size(
        market_dir, tmp_path):
    small = network_definition.create_encoder((64, 32, 3))
    path = deploy.write_onnx(small, str(tmp_path / "small.onnx"), (64, 32, 3))
    assert encoder_lib.load(path).image_shape == (64, 32, 3)
    summary = protocol.run_test(MARKET, path, market_dir)
    assert summary["num_queries"] > 0 and summary["checkpoint"] == path
    with pytest.raises(UsageError, match=r"image_shape=\(128, 64, 3\): the "
                       r"model .*small.onnx takes patches of 64x32"):
        protocol.run_test(MARKET, path, market_dir, image_shape=(128, 64, 3))


def test_corrupt_or_foreign_models_and_unknown_backends_are_one_line(
        exports, tmp_path):
    garbage = tmp_path / "broken.onnx"
    garbage.write_bytes(b"\x08\x07not a model" * 10)
    with pytest.raises(UsageError, match="ONNX Runtime cannot load it"):
        encoder_lib.load(str(garbage))
    bad_xml = tmp_path / "broken.xml"
    bad_xml.write_text("<net><layers>")
    with pytest.raises(UsageError, match="OpenVINO cannot load it"):
        encoder_lib.load(str(bad_xml))
    # an IR whose .bin is missing, cut short or another model's: the
    # reason, not the source file OpenVINO raised it in
    xml = exports[1]
    weights = open(xml[:-4] + ".bin", "rb").read()
    for name, data, reason in (
            ("missing", None, "bin file cannot be found"),
            ("truncated", weights[:100000], "Incorrect weights in bin file"),
            ("other", _other_model_weights(tmp_path), "")):
        shutil.copy(xml, tmp_path / f"{name}.xml")
        if data is not None:
            (tmp_path / f"{name}.bin").write_bytes(data)
        with pytest.raises(UsageError) as error:
            encoder_lib.load(str(tmp_path / f"{name}.xml"))
        message = str(error.value)
        assert "OpenVINO cannot load it: " in message and reason in message
        assert "Exception from" not in message and "\n" not in message
        assert "the .bin written with it" in message
    with pytest.raises(UsageError, match="backend='onnxruntime': cannot run"):
        encoder_lib.load(exports[1], backend="onnxruntime")
    with pytest.raises(UsageError, match="backend='tensorrt': expected"):
        encoder_lib.load(exports[0], backend="tensorrt")
    # an ONNX model that takes float NCHW input, as other projects export
    import onnx
    from onnx import helper, TensorProto
    graph = helper.make_graph(
        [helper.make_node("Identity", ["images"], ["features"])], "other",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                       ["N", 3, 256, 128])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT,
                                       ["N", 3, 256, 128])])
    foreign = str(tmp_path / "foreign.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]), foreign)
    with pytest.raises(UsageError, match="its input is float"):
        encoder_lib.load(foreign)


def _other_model_weights(tmp_path):
    """The .bin of another network (a smaller input, fewer weights)."""
    small = network_definition.create_encoder((64, 32, 3))
    deploy.write_openvino(small, str(tmp_path / "small.xml"), (64, 32, 3))
    return (tmp_path / "small.bin").read_bytes()


def test_deploy_exports_never_replace_other_files(trained, exports,
                                                   tmp_path):
    notes = tmp_path / "notes.xml"
    notes.write_text("<notes>mine</notes>")
    bin_file = tmp_path / "m.bin"
    bin_file.write_bytes(b"someone's data")
    for check, output, fragment in (
            (deploy.check_onnx_output, notes, "ending in .onnx"),
            (deploy.check_openvino_output, notes,
             f"refusing to replace {notes}"),
            (deploy.check_openvino_output, tmp_path / "m.xml",
             f"refusing to replace {bin_file}"),
            (deploy.check_onnx_output, tmp_path / "x.pb", "ending in .onnx")):
        with pytest.raises(UsageError, match=re.escape(fragment)):
            check(str(output))
    with pytest.raises(UsageError, match="refusing"):
        deploy.write_openvino(trained[1], str(tmp_path / "m.xml"),
                              (128, 64, 3))
    assert notes.read_text() == "<notes>mine</notes>"
    assert bin_file.read_bytes() == b"someone's data"
    # an earlier output of its own is replaced
    for extension in (".xml", ".bin"):
        shutil.copy(exports[1][:-4] + extension, tmp_path / f"own{extension}")
    deploy.write_openvino(trained[1], str(tmp_path / "own.xml"), (128, 64, 3))
    assert sorted(os.listdir(tmp_path)) == ["m.bin", "notes.xml", "own.bin",
                                            "own.xml"]
    # the modes check before loading the checkpoint; --int8 is for ONNX and
    # OpenVINO
    checkpoint, _ = trained
    line = one_error_line(run_script(
        "train_market1501.py", "--mode=saved_model", "--int8",
        f"--restore_path={checkpoint}", f"--output={tmp_path / 'sm'}"))
    assert line.endswith("--int8 with --mode=saved_model: int8 models are "
                         "written by --mode=onnx, --mode=openvino and "
                         "--mode=tflite"), line
    # a .tflite of someone else's is kept; an own one is replaced
    theirs = tmp_path / "theirs.tflite"
    theirs.write_bytes(b"\x1c\x00\x00\x00TFL3 someone's model")
    with pytest.raises(UsageError, match="refusing to replace"):
        deploy.write_tflite(trained[1], str(theirs), (128, 64, 3))
    assert theirs.read_bytes() == b"\x1c\x00\x00\x00TFL3 someone's model"
    with pytest.raises(UsageError, match="ending in .tflite"):
        deploy.check_tflite_output(str(tmp_path / "model.lite"))
    own = deploy.write_tflite(trained[1], str(tmp_path / "own.tflite"),
                              (128, 64, 3))
    before = os.path.getmtime(own)
    deploy.write_tflite(trained[1], own, (128, 64, 3))
    assert os.path.getmtime(own) >= before and deploy.TFLITE_MODEL.matches(
        own)


def _as_boxmot_feeds(crops):
    """What BoxMOT 25 feeds a re-identification model, from uint8 BGR crops
    already at the model's size: RGB / 255, ImageNet's mean and standard
    deviation, NCHW float32 (written out here, apart from the project's
    own code)."""
    rgb = crops[..., ::-1].astype(np.float32) / 255.0
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return ((rgb - mean) / std).transpose(0, 3, 1, 2).copy()


def _cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def test_the_boxmot_layout_takes_boxmots_input_and_gives_the_features(
        trained, market_dir, tmp_path):
    import onnx
    import openvino
    from ai_edge_litert.interpreter import Interpreter
    from cosine_metric_learning import export
    checkpoint, encoder = trained
    crops = _crops(os.path.join(market_dir, "bounding_box_test"), 16)
    frozen = encoder_lib.load(export.freeze(encoder, str(tmp_path / "m.pb"),
                                            (128, 64, 3)))
    expected = frozen(crops)  # the frozen graph, fed BGR uint8 NHWC
    feeds = _as_boxmot_feeds(crops)
    sidecar = {"model_kwargs": {"img_size": [128, 64]}}
    paths = {}
    for name, write in (("m.onnx", deploy.write_onnx),
                        ("m.xml", deploy.write_openvino),
                        ("m.tflite", deploy.write_tflite)):
        paths[name] = write(encoder, str(tmp_path / name), (128, 64, 3),
                            layout="boxmot")
        # BoxMOT reads the size from the sidecar, strictly: nothing else
        with open(paths[name] + ".metadata.json") as f:
            assert json.load(f) == sidecar
    model = onnx.load(paths["m.onnx"])
    (inputs,), (outputs,) = model.graph.input, model.graph.output
    assert inputs.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    dims = inputs.type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 128,
                                                                     64]
    assert [d.dim_value for d in outputs.type.tensor_type.shape.dim[1:]] == \
        [128]
    assert {p.key: p.value for p in model.metadata_props}[
        "cosine_metric_learning.layout"] == "boxmot"
    import onnxruntime
    got = {"m.onnx": onnxruntime.InferenceSession(paths["m.onnx"]).run(
        None, {"images": feeds})[0]}
    compiled = openvino.Core().compile_model(paths["m.xml"], "CPU", {
        "INFERENCE_PRECISION_HINT": "f32"})
    assert list(compiled.input().get_partial_shape()[1:].to_shape()) == \
        [3, 128, 64]
    got["m.xml"] = compiled(feeds)[0]
    runner = Interpreter(model_path=paths["m.tflite"]).get_signature_runner()
    details = runner.get_input_details()["images"]
    assert details["dtype"] == np.float32
    assert list(details["shape_signature"]) == [-1, 3, 128, 64]  # NCHW
    got["m.tflite"] = runner(images=feeds)["features"]
    for name, features in got.items():
        assert features.shape == (16, 128), name
        assert _cosines(features, expected).min() >= 0.9999, name
    # int8 through the command, at its default name; this project's
    # encoder refuses the layout in one line
    result = run_script("train_market1501.py", "--mode=openvino",
                        "--export_layout=boxmot", "--int8",
                        "--calibration_images=50",
                        f"--restore_path={checkpoint}",
                        f"--dataset_dir={market_dir}", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    xml = tmp_path / "market1501_boxmot_int8.xml"
    assert json.loads((tmp_path / (xml.name + ".metadata.json")).read_text()) \
        == sidecar
    features = openvino.Core().compile_model(str(xml), "CPU")(feeds)[0]
    assert _cosines(features, expected).min() >= 0.99
    # this project's encoder refuses the layout in one line that says
    # what it is, in every format (each runtime names float32 its way)
    for path in paths.values():
        with pytest.raises(UsageError, match="BoxMOT's layout"):
            encoder_lib.load(path)
    with pytest.raises(UsageError, match="its input is float .N, 3, H, W.,"
                       " BoxMOT's layout"):
        encoder_lib.load(str(xml))  # the int8 model the command wrote
    # the default layout over a BoxMOT export: the sidecar that described
    # the earlier model goes (BoxMOT would read it); one not of this
    # kind is left
    result = run_script("train_market1501.py", "--mode=onnx",
                        f"--restore_path={checkpoint}",
                        f"--output={paths['m.onnx']}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not os.path.exists(paths["m.onnx"] + ".metadata.json")
    assert encoder_lib.load(paths["m.onnx"])(crops[:2]).shape == (2, 128)
    with open(paths["m.tflite"] + ".metadata.json", "w") as f:
        f.write("my notes")
    deploy.write_tflite(encoder, paths["m.tflite"], (128, 64, 3))
    with open(paths["m.tflite"] + ".metadata.json") as f:
        assert f.read() == "my notes"


def test_a_layout_where_there_is_none_is_one_line(trained, tmp_path):
    checkpoint, _ = trained
    for extra, message in (
            (["--mode=freeze", "--export_layout=boxmot"],
             "--export_layout=boxmot with --mode=freeze: other layouts are "
             "written by --mode=onnx, --mode=openvino and --mode=tflite"),
            (["--mode=onnx", "--export_layout=nchw"], "--export_layout"),
            # no training images to calibrate on: said before the work
            (["--mode=onnx", "--int8"], "--int8 needs a calibration set, "
             "the training images of --dataset_dir=./Market-1501-v15.09.15/"
             ", and they cannot be read")):
        result = run_script("train_market1501.py", *extra,
                            f"--restore_path={checkpoint}",
                            cwd=str(tmp_path))
        assert result.returncode == 2
        assert message in one_error_line(result)
    assert os.listdir(tmp_path) == []


def test_boxmot_default_names_hold_none_of_its_guesses():
    from cosine_metric_learning import cli
    assert cli.default_output(cli.Mode.ONNX, "market1501", False,
                              "boxmot") == "market1501_boxmot.onnx"
    name = cli.default_output(cli.Mode.OPENVINO, "veri", True, "boxmot")
    assert name == "cosine_reid_boxmot_int8.xml"
    assert not any(g in name for g in cli.BOXMOT_NAME_GUESSES)
    assert cli.default_output(cli.Mode.TFLITE, "veri", False,
                              "default") == "veri.tflite"


def test_the_fastest_backend_is_the_fastest_installed_for_the_format(
        exports, tmp_path):
    from cosine_metric_learning import backends
    onnx, xml = exports
    # OpenVINO (installed with the deploy extra) runs both formats
    assert backends.resolve(onnx, "fastest") == ("onnx", "openvino")
    assert backends.resolve(xml, "fastest") == ("openvino", "openvino")
    pb = tmp_path / "m.pb"
    pb.write_bytes(b"")
    assert backends.resolve(str(pb), "fastest") == ("frozen", "tensorflow")
    loaded = encoder_lib.load(onnx, backend="fastest")
    assert loaded.backend == "openvino"
    crops = np.random.default_rng(0).integers(0, 256, (4, 128, 64, 3),
                                              dtype=np.uint8)
    float32 = encoder_lib.load(onnx)(crops)
    # at the processor's precision: bfloat16 where it has it
    assert np.sum(loaded(crops) * float32, axis=1).min() > 0.99


# real models trained by others, beside the checkout (or where
# OMZ_MODELS says): the test is skipped without them
SHARED_MODELS = os.environ.get("OMZ_MODELS", os.path.join(
    os.path.dirname(ROOT), "shared", "models", "omz"))


def test_an_open_model_zoo_reid_model_is_a_model_like_ours(tmp_path):
    """Intel's person-reidentification-retail-0288 (an OpenVINO IR of
    another layout: float BGR NCHW crops named data) as --model: its
    features are OpenVINO's own on the same crops, made unit; the
    pedestrian detector's IR, of another output, is refused."""
    path = os.path.join(SHARED_MODELS, "person-reidentification-retail-0288",
                        "FP32", "person-reidentification-retail-0288.xml")
    if not os.path.isfile(path):
        pytest.skip("the Open Model Zoo models are not on this machine")
    ov = pytest.importorskip("openvino")
    encoder = encoder_lib.load(path)
    assert encoder.image_shape == (256, 128, 3)
    patches = np.random.default_rng(1).integers(0, 256, (3, 256, 128, 3),
                                                dtype=np.uint8)
    ours = np.asarray(encoder(patches))
    compiled = ov.Core().compile_model(path, "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = np.concatenate([
        compiled(patch.transpose(2, 0, 1)[None].astype(np.float32))[0]
        for patch in patches])
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    assert ours.shape == (3, 256)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    detector = os.path.join(SHARED_MODELS, "pedestrian-detection-adas-0002",
                            "FP16", "pedestrian-detection-adas-0002.xml")
    with pytest.raises(UsageError, match="Open Model Zoo's "
                       "re-identification layout"):
        encoder_lib.load(detector)
