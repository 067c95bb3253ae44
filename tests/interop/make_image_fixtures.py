"""Writes the image fixtures that Lockstep's image tests compare against:
what TensorFlow / Keras 3 themselves compute (issue #19).

Run by hand, never by the build (TensorFlow is not a dependency):

    /opt/tf-venv/bin/python tests/interop/make_image_fixtures.py tests/interop/image_fixtures

It writes into the output folder:
  - png/*.png: PNGs of every kind (1/2/4/8/16-bit gray, gray + alpha, RGB,
    RGBA, palettes with and without transparency, tRNS, Adam7 interlacing),
    written by the small PNG writer below (TensorFlow writes 8/16-bit gray,
    RGB and RGBA only);
  - jpeg/*.jpg: JPEGs written by tf.io.encode_jpeg (baseline and
    progressive, 4:2:0 and 4:4:4, RGB and grayscale, odd sizes), and a CMYK
    one written by Pillow (the system's python3-pil; TensorFlow cannot);
  - folder/: a small image folder for image_dataset_from_directory (two
    classes, nested files, skipped extensions, a hidden folder);
  - keras_layers.keras: a Sequential model with RandomFlip and RandomRotation
    as Keras saves it;
  - arrays.bin + manifest.json: every expected array (uint8 or float32,
    little-endian, at an offset) with its shape, and the other facts the
    tests check (file lists, printed lines):
      decode/<file>/c<channels>: tf.io.decode_image(bytes, channels,
        expand_animations=False);
      resize/...: tf.image.resize (bilinear and nearest, antialias=False);
      load/...: Keras's own _load_image_tf (crop_to_aspect_ratio,
        pad_to_aspect_ratio), the function image_dataset_from_directory maps;
      affine/...: tf.raw_ops.ImageProjectiveTransformV3, the kernel of
        keras.ops.image.affine_transform on TensorFlow;
      rotation/...: keras.layers.RandomRotation with a fixed angle
        (factor=(f, f)), called with training=True;
      folder/...: image_dataset_from_directory's file_paths, labels,
        class_names, printed lines and (unshuffled) images.
Everything is small (about 340 KB in all) so it can be committed.
"""
import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import tensorflow as tf
import keras
from keras.src.utils import image_dataset_utils

RNG = np.random.default_rng(19)


class Arrays:
    """Collects arrays into one binary file, indexed by the manifest."""

    def __init__(self):
        self.blob = bytearray()
        self.index = {}

    def add(self, name, array):
        a = np.asarray(array)
        if a.dtype == np.uint8:
            dtype = "uint8"
        else:
            a = a.astype("<f4")
            dtype = "float32"
        assert name not in self.index, name
        self.index[name] = {"dtype": dtype, "shape": list(a.shape), "offset": len(self.blob)}
        self.blob += a.tobytes()


# ---- PNG writing (TensorFlow has no palette, tRNS, sub-byte or interlaced PNGs) ----

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def pack_rows(samples, bit_depth):
    """Rows of [h, w, ch] integer samples as PNG scanlines (filter 0)."""
    out = bytearray()
    for row in samples:
        flat = row.reshape(-1)
        out.append(0)
        if bit_depth == 16:
            out += flat.astype(">u2").tobytes()
        elif bit_depth == 8:
            out += flat.astype(np.uint8).tobytes()
        else:
            per = 8 // bit_depth
            for i in range(0, len(flat), per):
                byte = 0
                for j in range(per):
                    v = int(flat[i + j]) if i + j < len(flat) else 0
                    byte |= v << (8 - bit_depth * (j + 1))
                out.append(byte)
    return out


def png_bytes(samples, bit_depth, color_type, plte=None, trns=None, interlace=False):
    h, w = samples.shape[:2]
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    if interlace:
        raw = bytearray()
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += pack_rows(sub, bit_depth)
    else:
        raw = pack_rows(samples, bit_depth)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if plte is not None:
        out += chunk(b"PLTE", bytes(np.asarray(plte, np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


def png_cases():
    h, w = 11, 13
    ramp = lambda hi, ch: RNG.integers(0, hi + 1, size=(h, w, ch))
    palette = RNG.integers(0, 256, size=(16, 3))
    gray8 = ramp(255, 1)
    gray8[0, 0, 0] = 77  # the transparent gray of gray8_trns
    rgb8 = ramp(255, 3)
    rgb8[0, 0] = [10, 20, 30]
    return {
        "gray1": png_bytes(ramp(1, 1), 1, 0),
        "gray2": png_bytes(ramp(3, 1), 2, 0),
        "gray4": png_bytes(ramp(15, 1), 4, 0),
        "gray8": png_bytes(gray8, 8, 0),
        "gray16": png_bytes(ramp(65535, 1), 16, 0),
        "gray8_trns": png_bytes(gray8, 8, 0, trns=struct.pack(">H", 77)),
        "gray_alpha8": png_bytes(ramp(255, 2), 8, 4),
        "gray_alpha16": png_bytes(ramp(65535, 2), 16, 4),
        "rgb8": png_bytes(rgb8, 8, 2),
        "rgb16": png_bytes(ramp(65535, 3), 16, 2),
        "rgb8_trns": png_bytes(rgb8, 8, 2, trns=struct.pack(">HHH", 10, 20, 30)),
        "rgba8": png_bytes(ramp(255, 4), 8, 6),
        "rgba16": png_bytes(ramp(65535, 4), 16, 6),
        "palette8": png_bytes(RNG.integers(0, 16, size=(h, w, 1)), 8, 3, plte=palette),
        "palette4_trns": png_bytes(RNG.integers(0, 16, size=(h, w, 1)), 4, 3, plte=palette,
                                   trns=bytes(RNG.integers(0, 256, size=5).astype(np.uint8))),
        "palette1": png_bytes(RNG.integers(0, 2, size=(h, w, 1)), 1, 3, plte=palette[:2]),
        "rgb8_interlaced": png_bytes(rgb8, 8, 2, interlace=True),
        "rgba16_interlaced": png_bytes(ramp(65535, 4), 16, 6, interlace=True),
        "gray2_interlaced": png_bytes(ramp(3, 1), 2, 0, interlace=True),
    }


def smooth(h, w, ch):
    """A photograph-like image (smooth gradients and some texture) for JPEG."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    planes = [127 + 90 * np.sin(x / (3 + c) + y / (5 + 2 * c)) + RNG.normal(0, 12, (h, w))
              for c in range(ch)]
    return np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)


def jpeg_cases():
    rgb = smooth(29, 37, 3)
    gray = smooth(29, 37, 1)
    enc = lambda img, **kw: tf.io.encode_jpeg(img, **kw).numpy()
    return {
        "rgb_baseline": enc(rgb, quality=90),
        "rgb_progressive": enc(rgb, quality=90, progressive=True),
        "rgb_444": enc(rgb, quality=95, chroma_downsampling=False),
        "gray_baseline": enc(gray, quality=90),
        "gray_progressive": enc(gray, quality=85, progressive=True),
        "rgb_q50_48x48": enc(smooth(48, 48, 3), quality=50),
    }


CMYK_SCRIPT = """
import sys
from PIL import Image
img = Image.new("CMYK", (8, 6), (10, 200, 30, 40))
img.save(sys.argv[1], "JPEG", quality=90)
"""


def decode(data, channels):
    return tf.io.decode_image(data, channels=channels, expand_animations=False).numpy()


def write_decode_fixtures(out, arrays, manifest):
    for sub in ("png", "jpeg"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    for name, data in png_cases().items():
        with open(os.path.join(out, "png", name + ".png"), "wb") as f:
            f.write(data)
        for c in (0, 1, 3, 4):
            arrays.add(f"decode/png/{name}.png/c{c}", decode(data, c))
    for name, data in jpeg_cases().items():
        with open(os.path.join(out, "jpeg", name + ".jpg"), "wb") as f:
            f.write(data)
        for c in (0, 1, 3):
            arrays.add(f"decode/jpeg/{name}.jpg/c{c}", decode(data, c))
    cmyk = os.path.join(out, "jpeg", "cmyk.jpg")
    subprocess.run(["/usr/bin/python3", "-c", CMYK_SCRIPT, cmyk], check=True)
    manifest["jpeg_decoder_of_tensorflow"] = "libjpeg-turbo bundled with TensorFlow " + tf.__version__


def write_resize_fixtures(arrays):
    image = RNG.uniform(0, 255, size=(13, 17, 3)).astype(np.float32)
    arrays.add("resize/input", image)
    for h, w in [(13, 17), (5, 7), (29, 31), (1, 1), (26, 8), (21, 30), (13, 34)]:
        for method in ("bilinear", "nearest"):
            out = tf.image.resize(image, (h, w), method=method, antialias=False).numpy()
            arrays.add(f"resize/{method}/{h}x{w}", out)


def write_load_fixtures(out, arrays):
    """Keras's own per-file function of image_dataset_from_directory."""
    paths = {"png": os.path.join(out, "png", "rgb8.png"),
             "jpeg": os.path.join(out, "jpeg", "rgb_baseline.jpg")}
    for kind, path in paths.items():
        for size in [(8, 8), (10, 4), (4, 10), (11, 13), (20, 30)]:
            for mode in ("crop", "pad"):
                for method in ("bilinear", "nearest"):
                    ds = tf.data.Dataset.from_tensor_slices([path]).map(
                        lambda p: image_dataset_utils._load_image_tf(
                            p, size, 3, method, "channels_last",
                            crop_to_aspect_ratio=(mode == "crop"),
                            pad_to_aspect_ratio=(mode == "pad")))
                    img = next(iter(ds)).numpy()
                    arrays.add(f"load/{kind}/{mode}/{method}/{size[0]}x{size[1]}", img)


def rotation_matrices(angles_deg, h, w):
    layer = keras.layers.RandomRotation(0.1)
    n = len(angles_deg)
    zeros, ones = np.zeros([n], np.float32), np.ones([n], np.float32)
    m = layer._compute_affine_matrix(
        center_x=0.5, center_y=0.5, angle=tf.constant(angles_deg, tf.float32),
        translate_x=zeros, translate_y=zeros, scale=ones, shear_x=zeros, shear_y=zeros,
        height=h, width=w)
    return np.asarray(m, np.float32)


def write_affine_fixtures(arrays):
    images = RNG.uniform(-3, 10, size=(2, 9, 11, 2)).astype(np.float32)
    arrays.add("affine/images", images)
    rot = rotation_matrices([30.0, -115.0], 9, 11)
    # A zoom out by 3 around the centre with a shift: samples far outside
    # the image, several reflections / wraps away.
    zoom = np.array([[3, 0.2, -14, 0.1, 3, -11, 0, 0], [-2.5, 0.5, 20, 0.3, 2.2, -4, 0, 0]],
                    np.float32)
    for name, transforms in (("rotation", rot), ("zoom", zoom)):
        arrays.add(f"affine/{name}/transforms", transforms)
        for fill in ("reflect", "wrap", "constant", "nearest"):
            for interp in ("bilinear", "nearest"):
                out = tf.raw_ops.ImageProjectiveTransformV3(
                    images=images, transforms=transforms, output_shape=[9, 11],
                    fill_value=7.5, interpolation=interp.upper(), fill_mode=fill.upper())
                arrays.add(f"affine/{name}/{fill}/{interp}", out.numpy())
    arrays.add("rotation/matrix/angles", np.array([30.0, -115.0], np.float32))
    arrays.add("rotation/matrix/9x11", rot)
    for factor, fill, fill_value, interp in [(0.1, "reflect", 0.0, "bilinear"),
                                             (-0.3, "constant", 3.0, "bilinear"),
                                             (0.45, "wrap", 0.0, "nearest"),
                                             (0.2, "nearest", 0.0, "bilinear")]:
        layer = keras.layers.RandomRotation((factor, factor), fill_mode=fill, fill_value=fill_value,
                                            interpolation=interp, seed=1)
        out = layer(images, training=True)
        arrays.add(f"rotation/{factor}/{fill}/{interp}", np.asarray(out))


def write_folder(out):
    """A small folder for image_dataset_from_directory; returns it."""
    root = os.path.join(out, "folder")
    shutil.rmtree(root, ignore_errors=True)
    files = {
        "cats/c01.png": ("png", (7, 9)), "cats/c02.PNG": ("png", (9, 7)),
        "cats/c03.jpg": ("jpeg", (16, 12)), "cats/c04.jpeg": ("jpeg", (12, 16)),
        "cats/inner/c05.png": ("png", (6, 6)), "cats/notes.txt": ("text", None),
        "dogs/d01.png": ("png", (8, 8)), "dogs/d02.png": ("png", (5, 11)),
        "dogs/d03.JPG": ("jpeg", (10, 10)), "dogs/d04.png": ("png", (9, 9)),
        "dogs/d05.png": ("png", (7, 5)), "dogs/d06.bin": ("text", None),
        "dogs/zz/d07.png": ("png", (6, 8)), ".hidden/h01.png": ("png", (4, 4)),
    }
    for rel, (kind, size) in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == "text":
            data = b"not an image\n"
        else:
            img = smooth(size[0], size[1], 3)
            data = (tf.io.encode_png(img) if kind == "png" else tf.io.encode_jpeg(img, quality=92)).numpy()
        with open(path, "wb") as f:
            f.write(data)
    with open(os.path.join(root, "README.txt"), "w") as f:
        f.write("a file beside the class folders: not a class\n")
    return root


def folder_run(arrays, name, root, **kwargs):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        result = keras.utils.image_dataset_from_directory(root, **kwargs)
    datasets = result if isinstance(result, list) else [result]
    runs = []
    for i, ds in enumerate(datasets):
        paths = [os.path.relpath(p, root) for p in ds.file_paths]
        run = {"file_paths": paths, "class_names": ds.class_names}
        if not kwargs.get("shuffle", True):
            batches = list(ds)
            if kwargs.get("label_mode", "int") is None:
                images = np.concatenate([b.numpy() for b in batches])
            else:
                images = np.concatenate([b[0].numpy() for b in batches])
                labels = np.concatenate([b[1].numpy() for b in batches])
                arrays.add(f"folder/{name}/{i}/labels", labels.astype(np.float32))
            arrays.add(f"folder/{name}/{i}/images", images)
        runs.append(run)
    return {"kwargs": {k: v for k, v in kwargs.items()}, "printed": buf.getvalue(), "datasets": runs}


def write_folder_fixtures(out, arrays, manifest):
    root = write_folder(out)
    common = {"image_size": (6, 10), "batch_size": 4}
    runs = {
        "sorted_int": dict(shuffle=False, **common),
        "sorted_gray_categorical": dict(shuffle=False, color_mode="grayscale",
                                        label_mode="categorical", **common),
        "sorted_binary_crop": dict(shuffle=False, label_mode="binary", crop_to_aspect_ratio=True,
                                   **common),
        "sorted_none_pad_nearest": dict(shuffle=False, label_mode=None, pad_to_aspect_ratio=True,
                                        interpolation="nearest", **common),
        "shuffled_seed_1337": dict(shuffle=True, seed=1337, **common),
        "shuffled_seed_7": dict(shuffle=True, seed=7, **common),
        "split_training": dict(shuffle=True, seed=1337, validation_split=0.3, subset="training",
                               **common),
        "split_validation": dict(shuffle=True, seed=1337, validation_split=0.3,
                                 subset="validation", **common),
        "split_both": dict(shuffle=True, seed=42, validation_split=0.25, subset="both", **common),
        "split_unshuffled_both": dict(shuffle=False, validation_split=0.25, subset="both",
                                      **common),
        "class_names_reversed": dict(shuffle=False, class_names=["dogs", "cats"], **common),
    }
    manifest["folder"] = {name: folder_run(arrays, name, root, **kw) for name, kw in runs.items()}


def write_keras_layers(out, manifest):
    model = keras.Sequential([
        keras.Input(shape=(8, 8, 3)),
        keras.layers.RandomFlip("horizontal", seed=3),
        keras.layers.RandomRotation((-0.2, 0.3), fill_mode="constant", fill_value=1.5,
                                    interpolation="nearest", seed=5),
        keras.layers.RandomFlip(),
        keras.layers.RandomRotation(0.1),
        keras.layers.Flatten(),
        keras.layers.Dense(2),
    ])
    model.save(os.path.join(out, "keras_layers.keras"))
    manifest["keras_layers"] = [
        {"class_name": l.__class__.__name__, "config": l.get_config()} for l in model.layers]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                              "image_fixtures")
    os.makedirs(out, exist_ok=True)
    arrays = Arrays()
    manifest = {"tensorflow": tf.__version__, "keras": keras.__version__}
    write_decode_fixtures(out, arrays, manifest)
    write_resize_fixtures(arrays)
    write_load_fixtures(out, arrays)
    write_affine_fixtures(arrays)
    write_folder_fixtures(out, arrays, manifest)
    write_keras_layers(out, manifest)
    manifest["arrays"] = arrays.index
    with open(os.path.join(out, "arrays.bin"), "wb") as f:
        f.write(arrays.blob)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, default=str)
    print(f"wrote {len(arrays.index)} arrays ({len(arrays.blob)} bytes) to {out}")


if __name__ == "__main__":
    main()
